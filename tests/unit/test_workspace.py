"""Specification of a workspace's single writer (memd.workspace): group commit, durable or failed as a whole,
and nothing on disk overwritten blind."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import shutil
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from clocks import START, FixedClock
from edits import note
from hot_files import own_file, read_hot

from memd import fsio, fsio_batch
from memd.batch import Draft
from memd.config import BudgetConfig, LimitsConfig, WarmConfig, WorkspaceConfig
from memd.errors import Busy, CorruptFile, ShuttingDown, StorageError
from memd.tiers import cold_format, hot_render, proposals_format, warm_format
from memd.tokens import TokenCounter
from memd.workspace import Workspace


@pytest.fixture
def make_workspace(tmp_path: Path, counter: TokenCounter, io: ThreadPoolExecutor) -> Callable[..., Workspace]:
    def make(budget: BudgetConfig | None = None, **kwargs: Any) -> Workspace:
        config = WorkspaceConfig("alpha", tmp_path / "alpha", budget=budget or BudgetConfig())
        ws = Workspace(config, counter, FixedClock(START), io, **kwargs)
        ws.open()
        return ws

    return make


@pytest.fixture
def ws(make_workspace: Callable[..., Workspace]) -> Workspace:
    return make_workspace()


# Edits as the handlers make them.


def log(action: str, **details: str) -> Callable[[Draft], Any]:
    return lambda draft: draft.log(action, tuple(details.items()))


def learn(category: str, text: str) -> Callable[[Draft], Any]:
    return lambda draft: draft.learn(category, text)


def run(*edits: Callable[[Draft], Any], ws: Workspace) -> list[Any]:
    """Send the edits concurrently; results or exceptions, in order."""

    async def go() -> list[Any]:
        return list(await asyncio.gather(*(ws.write(e) for e in edits), return_exceptions=True))

    return asyncio.run(go())


def day_file(ws: Workspace) -> Path:
    return ws.root / "warm" / "2024-03-15.md"


def context_json(ws: Workspace) -> Path:
    return ws.root / "hot" / "context.json"


def memory_md(ws: Workspace) -> Path:
    return ws.root / "cold" / "MEMORY.md"


# --- opening ---------------------------------------------------------------------------------------------------


def test_open_creates_the_tier_directories_and_removes_stale_temp_files(
    make_workspace: Callable[..., Workspace], tmp_path: Path
) -> None:
    (tmp_path / "alpha" / "hot").mkdir(parents=True)
    stale = tmp_path / "alpha" / "hot" / ".context.json.memd-tmp-1-deadbeef"
    stale.write_bytes(b"{half")

    ws = make_workspace()

    assert all((ws.root / tier).is_dir() for tier in ("hot", "warm", "cold"))
    assert not stale.exists()


def test_an_existing_agent_memory_directory_is_adopted_as_it_is(
    make_workspace: Callable[..., Workspace], tmp_path: Path
) -> None:
    root = tmp_path / "alpha"
    for tier in ("hot", "warm", "cold"):
        (root / tier).mkdir(parents=True)
    (root / "hot" / "context.json").write_text('{"task": "Refactor auth", "their_field": 1}')
    (root / "warm" / "2024-03-15.md").write_text("### 08:00:00 - Earlier work\nResult: ok\n")
    (root / "cold" / "MEMORY.md").write_text("# Agent Memory\n\n## Testing\n- [2024-03-01] Use fixtures\n")

    ws = make_workspace()

    assert ws.hot.doc["task"] == "Refactor auth"
    assert [e.action for e in ws.warm.entries_for(START.date())] == ["Earlier work"]
    assert [lr.text for lr in ws.cold.learnings] == ["Use fixtures"]


# --- group commit --------------------------------------------------------------------------------------------


def test_concurrent_writes_are_committed_in_far_fewer_batches_and_all_reach_the_disk(ws: Workspace) -> None:
    results = run(*(log(f"step {i}", index=str(i)) for i in range(100)), ws=ws)

    assert all(not isinstance(r, BaseException) for r in results)
    entries = warm_format.parse_day(day_file(ws).read_text(encoding="utf-8"))
    assert [e.action for e in entries] == [f"step {i}" for i in range(100)]
    assert ws.health.writes == 100
    assert ws.health.batches <= 10


def test_writes_that_arrive_while_a_batch_is_made_durable_form_the_next_batch(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered, release = threading.Event(), threading.Event()
    real_apply = fsio_batch.apply_writes

    def slow_apply(writes: list[fsio_batch.FileWrite]) -> list[fsio.Fingerprint]:
        entered.set()
        assert release.wait(10)
        return real_apply(writes)

    monkeypatch.setattr("memd.workspace.fsio_batch.apply_writes", slow_apply)

    async def go() -> list[Any]:
        first = asyncio.ensure_future(ws.write(log("first")))
        assert await asyncio.to_thread(entered.wait, 10)  # batch 1 is in the worker thread now
        rest = [asyncio.ensure_future(ws.write(log(f"queued {i}"))) for i in range(50)]
        await asyncio.sleep(0)
        assert ws.pending == 50
        release.set()
        return list(await asyncio.gather(first, *rest))

    results = asyncio.run(go())

    assert len(results) == 51
    assert ws.health.batches == 2
    entries = warm_format.parse_day(day_file(ws).read_text(encoding="utf-8"))
    assert [e.action for e in entries] == ["first"] + [f"queued {i}" for i in range(50)]


def test_a_batch_writes_each_file_once(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    batches: list[list[fsio_batch.FileWrite]] = []
    real_apply = fsio_batch.write_batch

    def recording_apply(root: Path, writes: list[fsio_batch.FileWrite]) -> list[fsio.Fingerprint]:
        batches.append(list(writes))
        return real_apply(root, writes)

    monkeypatch.setattr("memd.fsio_batch.write_batch", recording_apply)

    run(*(note(f"n{i}") for i in range(20)), *(learn("Testing", f"l{i}") for i in range(5)), log("x"), ws=ws)

    assert len(batches) == 1
    paths = [w.path for w in batches[0]]
    assert sorted(paths) == sorted({context_json(ws), own_file(ws.root), memory_md(ws), day_file(ws)})
    assert [n["text"] for n in read_hot(ws.root)["notes"]] == [f"n{i}" for i in range(20)]


def test_a_full_queue_answers_busy_instead_of_growing(make_workspace: Callable[..., Workspace]) -> None:
    ws = make_workspace(max_pending=5)

    results = run(*(log(f"e{i}") for i in range(8)), ws=ws)

    assert [isinstance(r, Busy) for r in results] == [False] * 5 + [True] * 3


def test_close_waits_for_queued_writes_and_refuses_new_ones(ws: Workspace) -> None:
    async def go() -> tuple[list[Any], BaseException | None]:
        queued = [asyncio.ensure_future(ws.write(log(f"e{i}"))) for i in range(5)]
        await asyncio.sleep(0)
        await ws.close()
        try:
            await ws.write(log("too late"))
        except ShuttingDown as exc:
            return [q.result() for q in queued], exc
        return [], None

    results, refused = asyncio.run(go())

    assert len(results) == 5
    assert isinstance(refused, ShuttingDown)
    assert len(warm_format.parse_day(day_file(ws).read_text(encoding="utf-8"))) == 5


def test_writes_wait_while_a_sweep_or_snapshot_holds_the_writer_then_land_in_order(ws: Workspace) -> None:
    async def go() -> tuple[int, list[Any]]:
        async with ws.exclusive:  # what snapshots and sweeps hold to see the files with no batch half-way
            queued = [asyncio.ensure_future(ws.write(log(f"e{i}"))) for i in range(5)]
            for _ in range(5):
                await asyncio.sleep(0)
            done_while_held = sum(q.done() for q in queued)
        return done_while_held, list(await asyncio.gather(*queued))

    done_while_held, results = asyncio.run(go())

    assert done_while_held == 0
    assert len(results) == 5
    entries = warm_format.parse_day(day_file(ws).read_text(encoding="utf-8"))
    assert [e.action for e in entries] == [f"e{i}" for i in range(5)]
    assert ws.health.batches == 1


def test_an_outside_hot_edit_is_seen_by_reads_while_a_log_only_batch_is_being_written(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(note("before"), log("day file exists"), ws=ws)
    entered, release = threading.Event(), threading.Event()
    real_apply = fsio_batch.apply_writes

    def slow_apply(writes: list[fsio_batch.FileWrite]) -> list[fsio.Fingerprint]:
        done = real_apply(writes)  # on disk, not yet published: today's file differs from what memd knows
        entered.set()
        assert release.wait(10)
        return done

    monkeypatch.setattr("memd.workspace.fsio_batch.apply_writes", slow_apply)

    async def go() -> tuple[set[str], set[str]]:
        writing = asyncio.ensure_future(ws.write(log("in flight")))
        assert await asyncio.to_thread(entered.wait, 10)  # the append is in the worker thread
        doc = json.loads(context_json(ws).read_bytes())
        doc["current_step"] = "edited by hand"
        fsio.atomic_replace(context_json(ws), json.dumps(doc).encode())
        seen = ws.refresh()  # what a read does first
        release.set()
        await writing
        return seen, ws.refresh()

    seen_during, seen_after = asyncio.run(go())

    assert seen_during == {"hot"}  # the hot edit at once; today's warm file, being appended to, left alone
    assert ws.hot.doc["current_step"] == "edited by hand"
    assert seen_after == set()  # memd's own append is not mistaken for an outside change afterwards
    assert ws.usage()["warm"].tokens == ws.counter.count(day_file(ws).read_text(encoding="utf-8"))


def test_a_batch_that_fails_while_publishing_fails_its_requests_and_the_writer_goes_on(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_commit(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a bug in publishing")

    monkeypatch.setattr(ws.warm, "commit_append", broken_commit)
    failed = run(log("first"), log("second"), ws=ws)
    monkeypatch.undo()
    after = run(log("third"), ws=ws)

    assert all(isinstance(r, RuntimeError) for r in failed)  # answered, not left hanging
    assert not isinstance(after[0], BaseException)


# --- a failed disk write -------------------------------------------------------------------------------------


def test_a_failed_disk_write_fails_the_whole_batch_and_changes_nothing(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(note("kept note"), log("kept entry"), learn("Testing", "kept learning"), ws=ws)
    before = {
        "hot": (json.loads(json.dumps(ws.hot.doc)), ws.hot.tokens),
        "cold": (ws.cold.text, ws.cold.tokens),
        "warm": (list(ws.warm.entries_for(START.date())), ws.warm.tokens_for(START.date())),
        "files": {p: p.read_bytes() for p in (context_json(ws), memory_md(ws), day_file(ws))},
        "usage": ws.usage_dict(),
    }

    def no_space(writes: list[fsio_batch.FileWrite]) -> list[fsio.Fingerprint]:
        raise OSError(errno.ENOSPC, "No space left on device", str(writes[0].path))

    monkeypatch.setattr("memd.workspace.fsio_batch.apply_writes", no_space)

    results = run(note("lost note"), log("lost entry"), learn("Testing", "lost learning"), ws=ws)

    assert all(isinstance(r, StorageError) for r in results), results
    assert all(r.data == {"errno": errno.ENOSPC} for r in results)
    assert "No space left on device" in ws.health.last_write_error
    assert ws.health.last_write_error_at == START.isoformat(timespec="seconds")
    assert (json.loads(json.dumps(ws.hot.doc)), ws.hot.tokens) == before["hot"]
    assert (ws.cold.text, ws.cold.tokens) == before["cold"]
    assert (ws.warm.entries_for(START.date()), ws.warm.tokens_for(START.date())) == before["warm"]
    assert {p: p.read_bytes() for p in before["files"]} == before["files"]
    assert ws.usage_dict() == before["usage"]

    monkeypatch.undo()
    later = run(note("later note"), ws=ws)

    assert not isinstance(later[0], BaseException)
    notes = [n["text"] for n in read_hot(ws.root)["notes"]]
    assert notes == ["kept note", "later note"]


def loop_factory(loop: str) -> Callable[[], asyncio.AbstractEventLoop]:
    if loop == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return asyncio.new_event_loop


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_a_failed_fsync_fails_exactly_its_batch_and_the_batch_queued_behind_it_is_written(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch, loop: str
) -> None:
    real_fsync = fsio.os.fsync
    fsyncs = 0
    queued_behind = threading.Event()

    def first_fsync_fails(fd: int) -> None:
        nonlocal fsyncs
        fsyncs += 1
        if fsyncs == 1:  # the first batch's append: fails once the next batch has queued behind it
            queued_behind.wait(10)
            raise OSError(errno.EIO, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(fsio.os, "fsync", first_fsync_fails)

    async def go() -> tuple[list[Any], list[Any]]:
        first = [asyncio.ensure_future(ws.write(log(a))) for a in ("a1", "a2")]
        while ws.writer.in_flight is None:
            await asyncio.sleep(0.001)
        second = [asyncio.ensure_future(ws.write(log(b))) for b in ("b1", "b2")]
        while ws.writer.pending < 2:
            await asyncio.sleep(0.001)
        queued_behind.set()
        return (
            list(await asyncio.gather(*first, return_exceptions=True)),
            list(await asyncio.gather(*second, return_exceptions=True)),
        )

    with asyncio.Runner(loop_factory=loop_factory(loop)) as runner:
        failed, written = runner.run(go())

    assert all(isinstance(r, StorageError) and "Input/output error" in r.message for r in failed), failed
    assert not [r for r in written if isinstance(r, BaseException)], written
    entries = warm_format.parse_day(day_file(ws).read_text(encoding="utf-8"))
    assert [e.action for e in entries] == ["b1", "b2"]  # the failed batch left nothing; the next one is whole
    assert ws.health.batches == 1 and ws.health.write_fault is False


def test_a_write_failing_half_way_through_a_batch_is_not_acknowledged_and_leaves_the_files_as_they_were(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(note("first"), ws=ws)

    def fail_the_append(path: Path, data: bytes, mode: int = 0o644, expected_size: int | None = None) -> None:
        raise OSError(errno.EIO, "Input/output error", str(path))  # the hot replace is published, the append fails

    monkeypatch.setattr("memd.fsio.durable_append", fail_the_append)

    results = run(log("entry"), note("second"), ws=ws)

    assert all(isinstance(r, StorageError) for r in results)
    monkeypatch.undo()
    run(log("after"), ws=ws)

    entries = warm_format.parse_day(day_file(ws).read_text(encoding="utf-8"))
    assert [e.action for e in entries] == ["after"]
    assert [e.action for e in ws.warm.entries_for(START.date())] == ["after"]
    assert ws.usage()["warm"].tokens == ws.counter.count(day_file(ws).read_text(encoding="utf-8"))
    # The hot replace that went in before the append failed was put back: a failed batch changes nothing.
    assert [n["text"] for n in ws.hot.doc["notes"]] == ["first"]
    assert [n["text"] for n in read_hot(ws.root)["notes"]] == ["first"]
    assert not [p for p in (ws.root / "hot").iterdir() if fsio.is_temp_name(p.name)]


# --- nothing is overwritten blind ----------------------------------------------------------------------------


def test_an_outside_edit_of_context_json_is_adopted_by_the_next_write(ws: Workspace) -> None:
    run(note("before the edit"), ws=ws)
    doc = json.loads(context_json(ws).read_bytes())
    doc["their_field"] = {"set by": "a person"}
    doc["current_step"] = "edited by hand"
    context_json(ws).write_text(json.dumps(doc), encoding="utf-8")

    run(note("after the edit"), ws=ws)

    on_disk = read_hot(ws.root)
    assert on_disk["their_field"] == {"set by": "a person"}
    assert on_disk["current_step"] == "edited by hand"
    assert [n["text"] for n in on_disk["notes"]] == ["before the edit", "after the edit"]


def test_a_context_json_replaced_by_another_tool_is_adopted(ws: Workspace) -> None:
    run(note("mine"), ws=ws)
    replacement = ws.root / "hot" / "checkout.tmp"
    replacement.write_text(json.dumps({"task": "checked out", "notes": []}), encoding="utf-8")
    replacement.replace(context_json(ws))  # what an editor or git checkout does

    run(note("next"), ws=ws)

    on_disk = json.loads(context_json(ws).read_bytes())
    assert on_disk["task"] == "checked out"
    assert [n["text"] for n in on_disk["notes"]] == ["next"]


def test_the_learnings_memd_holds_follow_each_learning_it_adds_without_parsing_the_file_again(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    sections = cold_format.parse_sections
    parses: list[int] = []
    monkeypatch.setattr(cold_format, "parse_sections", lambda text: parses.append(1) or sections(text))
    run(learn("Testing", "first"), learn("Ops", "second"), learn("Deploy", "third"), ws=ws)
    assert [lr.text for lr in ws.cold.learnings] == ["first", "second", "third"]
    parses.clear()

    for i in range(20):  # into sections that exist: each learning is added to what memd holds
        run(learn(("Testing", "Ops", "Deploy")[i % 3], f"learning {i}"), ws=ws)
        assert ws.cold.learnings == sections((ws.root / "cold" / "MEMORY.md").read_text())[0]
        assert ws.cold.tokens == ws.counter.count(ws.cold.text)
    assert parses == []


def test_a_batch_of_learnings_is_taken_one_insertion_at_a_time_and_an_undone_one_is_not(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(learn("Testing", "first"), learn("Ops", "second"), ws=ws)
    assert ws.cold.learnings
    sections, count = cold_format.parse_sections, ws.counter.count
    parses: list[int] = []
    whole: list[int] = []
    monkeypatch.setattr(cold_format, "parse_sections", lambda text: parses.append(1) or sections(text))
    monkeypatch.setattr(ws.counter, "count", lambda text: whole.append(len(text)) or count(text))

    def learn_then_fail(draft: Draft) -> None:
        draft.learn("Ops", "undone")
        raise ValueError("the request fails after its learning")

    run(*(learn(("Testing", "Ops")[i % 2], f"batched {i}") for i in range(6)), learn_then_fail, ws=ws)

    text = (ws.root / "cold" / "MEMORY.md").read_text()
    assert "undone" not in text and all(f"batched {i}" in text for i in range(6))
    assert ws.cold.learnings == sections(text)[0]
    assert parses == [] and max(whole) < len(text) // 2  # neither parsed nor counted whole
    assert ws.cold.tokens == count(text)


def test_a_fence_written_by_hand_is_seen_by_the_next_learning_and_the_learnings_memd_holds(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """memd looks for fences once per text and carries "none" across its own insertions; a person's fence around a
    "## Testing" line must still keep the next learning out of the code block."""
    run(learn("Testing", "first"), learn("Testing", "second"), ws=ws)
    fenced = "## Example\n```md\n## Testing\n- [2024-01-01] inside a code sample\n```\n"
    memory_md(ws).write_text(fenced + memory_md(ws).read_text(encoding="utf-8"), encoding="utf-8")

    run(learn("Testing", "third"), ws=ws)
    run(learn("Testing", "fourth"), ws=ws)

    text = memory_md(ws).read_text(encoding="utf-8")
    assert text.startswith(fenced)  # nothing inserted into the code sample
    assert [lr.text for lr in cold_format.parse_memory(text)] == ["fourth", "third", "second", "first"]
    assert ws.cold.learnings == cold_format.parse_memory(text)


def test_an_outside_edit_of_memory_md_is_kept_when_a_learning_is_added(ws: Workspace) -> None:
    run(learn("Testing", "Use tmp_path"), ws=ws)
    with memory_md(ws).open("a", encoding="utf-8") as f:
        f.write("\n## Written by hand\n- [2024-03-14] Keep this line\n\nA paragraph of prose.\n")

    run(learn("Testing", "Run ruff before pushing"), ws=ws)

    text = memory_md(ws).read_text(encoding="utf-8")
    assert "## Written by hand\n- [2024-03-14] Keep this line\n\nA paragraph of prose.\n" in text
    assert [(lr.category, lr.text) for lr in cold_format.parse_memory(text)] == [
        ("Testing", "Run ruff before pushing"),
        ("Testing", "Use tmp_path"),
        ("Written by hand", "Keep this line"),
    ]


def test_an_outside_append_to_the_day_file_is_kept_and_counted(ws: Workspace) -> None:
    run(log("mine"), ws=ws)
    with day_file(ws).open("a", encoding="utf-8") as f:
        f.write("### 09:31:00 - Another agent's entry\nResult: ok")  # no final newline

    run(log("mine again"), ws=ws)

    text = day_file(ws).read_text(encoding="utf-8")
    assert [e.action for e in warm_format.parse_day(text)] == ["mine", "Another agent's entry", "mine again"]
    assert ws.usage()["warm"].tokens == ws.counter.count(text)


def test_a_new_day_file_names_the_time_zone_its_entries_are_stamped_in(
    tmp_path: Path, counter: TokenCounter, io: ThreadPoolExecutor
) -> None:
    config = WorkspaceConfig("alpha", tmp_path / "alpha", warm=WarmConfig(timezone="America/St_Johns"))
    ws = Workspace(config, counter, FixedClock(START), io)  # 09:30 UTC is 06:00 in St. John's (UTC-03:30)
    ws.open()

    run(log("two\nlines", path="C:\\repo"), ws=ws)

    assert day_file(ws).read_text(encoding="utf-8") == (
        "# Activity Log 2024-03-15 (UTC-02:30, America/St_Johns)\n\n"  # daylight time since 10 March
        "### 07:00:00 - two\n"
        "    lines\n"
        "```\n"
        "path: C:\\repo\n"
        "```\n"
        "\n"
    )


def test_memds_first_entry_in_a_day_file_another_tool_started_follows_a_zoned_heading_once(ws: Workspace) -> None:
    day_file(ws).write_text(
        "# Activity Log 2024-03-15\n\n### 08:00:00 - the article's\n```\npath: C:\\new\n```\nResult: ok",
        encoding="utf-8",
    )
    ws.refresh()

    run(log("memd's", path="C:\\new"), ws=ws)
    run(log("memd's again"), ws=ws)

    text = day_file(ws).read_text(encoding="utf-8")
    assert text.count("# Activity Log 2024-03-15 (UTC+00:00, UTC)\n") == 1
    assert text.index("(UTC+00:00, UTC)") > text.index("Result: ok")
    entries = ws.warm.entries_for(START.date())
    assert [(e.action, dict(e.details).get("path")) for e in entries] == [
        ("the article's", "C:\n" + "ew"),  # before the zoned heading: the older rule, which reads `\n` as a newline
        ("memd's", "C:\\new"),
        ("memd's again", None),
    ]
    assert entries == warm_format.parse_day(text)


def test_a_corrupt_context_json_blocks_hot_edits_but_not_warm_edits(ws: Workspace) -> None:
    run(note("last good"), ws=ws)
    context_json(ws).write_text('{"task": "half written', encoding="utf-8")

    hot_result, warm_result = run(note("refused"), log("accepted"), ws=ws)

    assert isinstance(hot_result, CorruptFile)
    assert str(context_json(ws)) in hot_result.message
    assert not isinstance(warm_result, BaseException)
    assert context_json(ws).read_text(encoding="utf-8") == '{"task": "half written'
    assert [n["text"] for n in ws.hot.doc["notes"]] == ["last good"]  # reads serve the last good document
    assert [e.action for e in warm_format.parse_day(day_file(ws).read_text(encoding="utf-8"))] == ["accepted"]


def test_hot_edits_resume_once_the_corrupt_file_is_fixed(ws: Workspace) -> None:
    context_json(ws).write_text("[]", encoding="utf-8")
    assert isinstance(run(note("refused"), ws=ws)[0], CorruptFile)

    context_json(ws).write_text('{"task": "fixed by hand"}', encoding="utf-8")
    run(note("accepted"), ws=ws)

    on_disk = read_hot(ws.root)
    assert on_disk["task"] == "fixed by hand"
    assert [n["text"] for n in on_disk["notes"]] == ["accepted"]


def test_a_memory_md_that_is_not_utf8_blocks_learnings_and_is_not_rewritten(ws: Workspace) -> None:
    memory_md(ws).write_bytes(b"# Agent Memory\n\xff\xfe\n")

    learned, logged = run(learn("Testing", "refused"), log("accepted"), ws=ws)

    assert isinstance(learned, CorruptFile)
    assert not isinstance(logged, BaseException)
    assert memory_md(ws).read_bytes() == b"# Agent Memory\n\xff\xfe\n"


# --- token usage ---------------------------------------------------------------------------------------------


def test_hot_and_warm_usage_match_a_full_recount_after_writes(ws: Workspace) -> None:
    for i in range(5):
        run(note(f"note {i} with ünïcode 🚀"), log(f"entry {i}", file=f"src/m{i}.py"), ws=ws)

    usage = ws.usage()

    assert usage["hot"].tokens == ws.counter.count("".join(hot_render.render_lines(ws.hot.doc)))
    assert usage["warm"].tokens == ws.counter.count(day_file(ws).read_text(encoding="utf-8"))


def test_cold_usage_matches_a_full_recount_after_learnings_in_new_categories(ws: Workspace) -> None:
    for category in ("Testing", "Deployment", "Code Style", "Performance"):
        run(learn(category, f"a lesson about {category.lower()}"), ws=ws)

    assert ws.usage()["cold"].tokens == ws.counter.count(memory_md(ws).read_text(encoding="utf-8"))


def test_usage_counts_only_the_recent_warm_days(ws: Workspace) -> None:
    clock = ws.clock
    assert isinstance(clock, FixedClock)
    run(log("old day"), ws=ws)
    clock.current = START + timedelta(days=ws.config.warm.recent_days)
    run(log("today"), ws=ws)

    today_file = ws.root / "warm" / f"{clock.current.date().isoformat()}.md"
    assert ws.usage()["warm"].tokens == ws.counter.count(today_file.read_text(encoding="utf-8"))


# --- the draft: what an edit sees ------------------------------------------------------------------------------


def test_a_logged_result_is_written_with_its_entry(ws: Workspace) -> None:
    run(lambda d: d.log("ran the tests", (("cmd", "pytest"),), "42 passed"), ws=ws)

    [entry] = warm_format.parse_day(day_file(ws).read_text(encoding="utf-8"))
    assert (entry.action, entry.details, entry.result) == ("ran the tests", (("cmd", "pytest"),), "42 passed")


def test_the_first_learning_of_a_workspace_makes_memory_md_hold_just_it(ws: Workspace) -> None:
    assert not memory_md(ws).exists()

    run(learn("Testing", "run pytest with -x"), ws=ws)

    assert memory_md(ws).read_text(encoding="utf-8") == cold_format.insert_learning(
        "", "Testing", START.date().isoformat(), "run pytest with -x"
    )


def proposal(pid: str, text: str) -> proposals_format.Proposal:
    return proposals_format.Proposal(pid, "Ops", START.date().isoformat(), text, kind="notable")


def test_an_edit_of_proposed_md_is_written_through_the_writer_and_a_failing_one_leaves_no_trace(
    ws: Workspace,
) -> None:
    def propose(pid: str, text: str, fail: bool = False) -> Callable[[Draft], Any]:
        def edit(draft: Draft) -> str:
            draft.proposals = proposals_format.insert(draft.edit_proposals(), proposal(pid, text))
            if fail:
                raise CorruptFile("this request fails after editing the draft")
            return pid

        return edit

    results = run(propose("p-00000001", "first"), propose("p-00000002", "lost", fail=True), ws=ws)
    run(propose("p-00000003", "third"), ws=ws)  # the draft starts from what the first batch wrote

    assert results[0] == "p-00000001" and isinstance(results[1], CorruptFile)
    written = proposals_format.parse((ws.root / "cold" / "PROPOSED.md").read_text(encoding="utf-8"))
    assert [(p.id, p.text) for p in written] == [("p-00000001", "first"), ("p-00000003", "third")]
    assert [p.id for p in ws.proposals.proposals] == ["p-00000001", "p-00000003"]


def test_a_draft_without_a_proposals_file_says_so() -> None:
    draft = Draft(START, START, None, None)  # type: ignore[arg-type]  # stores unused: it fails before

    with pytest.raises(RuntimeError) as raised:
        draft.edit_proposals()

    assert str(raised.value) == "this draft has no proposals file"


# --- the planner and the writer: what each batch leaves behind -----------------------------------------------


class RecordingSink:
    """The change sink a daemon gives a workspace, recording what it is told."""

    def __init__(self) -> None:
        self.told: list[tuple[frozenset[str], str]] = []

    def registered(self, ws: Workspace) -> None:
        pass

    def changed(self, ws: Workspace, tiers: frozenset[str], origin: str) -> None:
        self.told.append((tiers, origin))

    async def before_destructive(self, ws: Workspace, why: str, days: Sequence[str] = ()) -> None:
        return None


def test_every_batch_is_acknowledged_leaves_the_stores_as_the_files_and_names_the_tiers_it_changed(
    make_workspace: Callable[..., Workspace], caplog: pytest.LogCaptureFixture
) -> None:
    sink = RecordingSink()
    ws = make_workspace(sink=sink)
    proposal_text = proposals_format.insert("", proposal("p-0000000a", "kept"))

    def propose(draft: Draft) -> None:
        draft.edit_proposals()
        draft.proposals = proposal_text

    def look_only(draft: Draft) -> None:  # an edit that reads cold and the proposals and changes neither
        draft.edit_cold()
        draft.edit_proposals()

    batches = [(log("entry"),), (note("a note"),), (learn("Ops", "a learning"),), (propose,), (look_only, log("more"))]
    with caplog.at_level("WARNING"):
        results = [run(*edits, ws=ws) for edits in batches]

    assert not [r for rs in results for r in rs if isinstance(r, BaseException)], results
    assert sink.told == [(frozenset({tier}), "write") for tier in ("warm", "hot", "cold", "cold", "warm")]
    assert caplog.records == []  # nothing went wrong, not even the counting done while the disk works
    assert ws.looks_changed() is False  # memd's own writes are never taken for someone else's
    assert ws.health.replans == 0 and ws.health.batches == 5 and ws.health.writes == 6
    assert read_hot(ws.root) == ws.hot.doc and ws.hot.tokens == ws.hot.count(ws.hot.doc)
    assert ws.cold.text == memory_md(ws).read_text(encoding="utf-8")
    assert ws.cold.tokens == ws.counter.count(ws.cold.text)
    assert ws.proposals.text == proposal_text
    assert [e.action for e in ws.warm.entries_for(START.date())] == ["entry", "more"]
    assert ws.usage()["warm"].tokens == ws.counter.count(day_file(ws).read_text(encoding="utf-8"))


def test_tokens_not_counted_ahead_are_counted_when_the_batch_is_published(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    calls = {"n": 0}
    real_count = ws.warm.count_append

    def warm_count_failing_first(write: fsio_batch.FileWrite) -> int:
        calls["n"] += 1
        if calls["n"] == 1:  # the count taken while the worker writes (hot's is not tried after it)
            raise RuntimeError("tokenizer hiccup")
        return real_count(write)

    monkeypatch.setattr(ws.warm, "count_append", warm_count_failing_first)

    with caplog.at_level("ERROR", logger="memd.planner"):
        results = run(note("a note"), log("entry"), ws=ws)

    assert not [r for r in results if isinstance(r, BaseException)]
    assert ws.hot.tokens == ws.hot.count(ws.hot.doc)
    assert ws.usage()["warm"].tokens == ws.counter.count(day_file(ws).read_text(encoding="utf-8"))
    assert [r.getMessage() for r in caplog.records] == ["workspace alpha: counting tokens ahead failed"]


def test_an_edit_that_fails_with_a_bug_is_logged_with_its_workspace_and_a_refusal_is_not(
    ws: Workspace, caplog: pytest.LogCaptureFixture
) -> None:
    def bug(draft: Draft) -> None:
        raise ValueError("a bug in an edit")

    def refusal(draft: Draft) -> None:
        raise CorruptFile("hot/context.json is not valid JSON")

    with caplog.at_level("ERROR", logger="memd.planner"):
        results = run(bug, refusal, log("after both"), ws=ws)

    assert isinstance(results[0], ValueError) and isinstance(results[1], CorruptFile)
    assert not isinstance(results[2], BaseException)
    logged = [(r.getMessage(), r.exc_info[0] if r.exc_info else None) for r in caplog.records]
    assert logged == [("workspace alpha: an edit failed", ValueError)]  # the bug, with its traceback


@pytest.mark.parametrize("kind", ["fifo", "symlink"])
def test_a_day_file_memd_must_not_append_to_fails_the_batch_and_writes_nothing(ws: Workspace, kind: str) -> None:
    day_file(ws).parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(day_file(ws))  # today's log is a FIFO: never opened (refused when the batch is written)
    else:
        elsewhere = ws.root.parent / "elsewhere.md"
        elsewhere.write_text("# someone else's file\n", encoding="utf-8")
        day_file(ws).symlink_to(elsewhere)  # never followed (refused when the batch is planned)

    results = run(log("entry"), note("a note in the same batch"), ws=ws)

    assert all(isinstance(r, StorageError) for r in results), results
    assert "notes" not in read_hot(ws.root) or read_hot(ws.root)["notes"] == []


def propose_big(draft: Draft) -> None:
    draft.proposals = proposals_format.insert(draft.edit_proposals(), proposal("p-0000000b", "x" * 600))


@pytest.mark.parametrize(
    ("limit", "key", "edit"),
    [
        ("hot_max_bytes", "hot_max_bytes", note("x" * 600)),
        ("cold_max_bytes", "cold_max_bytes", learn("Ops", "x" * 600)),
        ("cold_max_bytes", "cold_max_bytes", propose_big),  # PROPOSED.md is held to MEMORY.md's cap
    ],
    ids=["hot", "cold", "proposals"],
)
def test_a_batch_that_would_pass_a_size_cap_fails_naming_the_cap_and_the_file_and_one_at_it_is_written(
    make_workspace: Callable[..., Workspace], limit: str, key: str, edit: Callable[[Draft], Any]
) -> None:
    probe = make_workspace()
    run(edit, ws=probe)
    if edit is propose_big:
        path = probe.root / "cold" / "PROPOSED.md"
    elif limit == "hot_max_bytes":
        path = own_file(probe.root)  # the note goes to hot/memd.json
    else:
        path = memory_md(probe)
    exact = len(path.read_bytes())
    shutil.rmtree(probe.root)

    at_cap = make_workspace(limits=LimitsConfig(**{limit: exact}))  # type: ignore[arg-type]
    assert not isinstance(run(edit, ws=at_cap)[0], BaseException)  # exactly at the cap is allowed
    shutil.rmtree(at_cap.root)

    over = make_workspace(limits=LimitsConfig(**{limit: exact - 1}))  # type: ignore[arg-type]
    [result] = run(edit, ws=over)

    assert isinstance(result, StorageError) and result.data == {"errno": errno.EFBIG}
    assert f"[limits] {key} ({exact - 1} bytes)" in result.message and str(path) in result.message


def test_a_reloaded_time_zone_decides_the_day_and_the_header_of_the_next_entry(ws: Workspace) -> None:
    tokyo = WorkspaceConfig("alpha", ws.root, warm=WarmConfig(timezone="Asia/Tokyo"))
    ws.reconfigure(tokyo)

    run(log("entry in Tokyo"), ws=ws)

    local = START.astimezone(ZoneInfo("Asia/Tokyo"))
    text = (ws.root / "warm" / f"{local.date().isoformat()}.md").read_text(encoding="utf-8")
    assert "Asia/Tokyo" in text.splitlines()[0] and "entry in Tokyo" in text
