"""Specification of a burst of learnings into a big cold/MEMORY.md (memd.tiers.cold_store.FLOOD_SECONDS): each
learning is acknowledged once it is on disk under its own category, as ever, but is appended at the end (the
file is not rewritten: same inode, the bytes written are the learning's); from the first append on every
learning is appended until a fold puts them back under their sections, once the burst is over, every
APPENDED_MAX learnings, before any other edit of the file and at close, into exactly the file that inserting them
one by one makes; a person's save or `>>` in the middle of a burst is planned on, never lost."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from hooked_io import HookedIO

from memd import cold_fold, fsio, fsio_append, fsio_batch, snapshot_history
from memd.batch import Draft
from memd.errors import ShuttingDown
from memd.tiers import cold_folds, cold_format, cold_store
from memd.tokens import TokenCounter
from memd.workspace import Workspace

DAY = "2024-03-15"  # the tests' clock (clocks.START)
BIG = "# Agent Memory\n" + "".join(
    f"\n## Topic {c}\n"
    + "".join(f"- [2024-01-0{1 + n % 9}] learning {n} about topic {c} and its details\n" for n in range(40))
    for c in range(40)
)


@pytest.fixture
def person_io() -> Iterator[HookedIO]:
    executor = HookedIO()
    yield executor
    executor.shutdown()


@pytest.fixture
def ws(open_alpha: Callable[..., Workspace], person_io: HookedIO) -> Workspace:
    memory = open_alpha(ThreadPoolExecutor(1)).root / "cold" / "MEMORY.md"
    memory.write_text(BIG, encoding="utf-8")
    return open_alpha(person_io)


def memory_md(ws: Workspace) -> Path:
    return ws.root / "cold" / "MEMORY.md"


def open_with_a_megabyte_of_memory(open_alpha: Callable[..., Workspace], person_io: HookedIO) -> tuple[Workspace, Path]:
    """The workspace opened on a MEMORY.md of 1.1 MB (50 sections of 600 learnings), and the file."""
    big = "# Agent Memory\n" + "".join(
        f"\n## Topic {c}\n" + f"- [2024-01-01] learning {c} of many\n" * 600 for c in range(50)
    )
    memory = open_alpha(ThreadPoolExecutor(1)).root / "cold" / "MEMORY.md"
    memory.write_text(big, encoding="utf-8")
    assert len(big) > 1_000_000
    return open_alpha(person_io), memory


def learn(category: str, text: str) -> Callable[[Draft], Any]:
    return lambda draft: draft.learn(category, text)


BURST = [("Topic 3", "b1"), ("Topic 3", "b2"), ("Topic 7", "b3"), ("New topic", "b4"), ("Topic 3", "b5")]


def folded(text: str, start: int | None) -> str:
    """`text` with the run from `start` folded back, as a fold makes it (the text itself when there is none)."""
    if start is None:
        return text
    blocks = cold_format.parse_appended(text[start:])
    assert blocks is not None
    return cold_format.fold_appended(text[:start], blocks)


def inserted_one_by_one(text: str, learnings: list[tuple[str, str]]) -> str:
    for category, learning in learnings:
        text = cold_format.insert_learning(text, category, DAY, learning)
    return text


def test_the_burst_fixture_is_big_enough_to_be_appended_to() -> None:
    assert len(BIG) >= cold_store.APPEND_FROM_CHARS


def test_each_learning_of_a_burst_is_appended_on_disk_under_its_category_and_the_file_is_not_rewritten(
    ws: Workspace,
) -> None:
    async def burst() -> list[tuple[int, int, list[cold_format.Learning]]]:
        seen = []
        for category, text in BURST:
            await ws.write(learn(category, text))
            st = os.stat(memory_md(ws))
            seen.append((st.st_ino, st.st_size, cold_format.parse_memory(memory_md(ws).read_text("utf-8"))))
        return seen

    seen = asyncio.run(burst())

    first_inode = seen[0][0]  # the first learning is inserted (no write came just before): a rewrite
    assert {inode for inode, _, _ in seen[1:]} == {first_inode}  # then appends only: the same file
    for (_, size_before, _), (_, size, parsed), (category, text) in zip(seen, seen[1:], BURST[1:], strict=False):
        added = size - size_before
        assert added < 100  # the learning's line (and its heading), not MEMORY.md again
        assert [(lr.category, lr.text) for lr in parsed if lr.text == text] == [(category, text)]
    assert ws.cold.learnings == cold_format.parse_memory(memory_md(ws).read_text("utf-8"))
    assert ws.cold.text == memory_md(ws).read_text("utf-8")


async def settled(ws: Workspace) -> None:
    """Until the fold armed after the last append has run (or ten seconds have passed)."""
    for _ in range(200):
        await asyncio.sleep(0.05)
        if ws.folder.timer is None and not ws.folder.running:
            return


def test_a_burst_is_folded_back_once_it_is_over_into_the_file_inserting_one_by_one_makes(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cold_fold, "TIDY_AFTER_SECONDS", 0.05)

    async def burst_then_pause() -> None:
        for category, text in BURST:
            await ws.write(learn(category, text))
        assert ws.cold.run_start is not None
        assert fsio_append.run_mark(memory_md(ws)) == cold_store.mark_for(
            ws.cold.text, ws.cold.run_start
        )  # for a restart
        await settled(ws)

    asyncio.run(burst_then_pause())

    text = memory_md(ws).read_text("utf-8")
    assert text == inserted_one_by_one(BIG, BURST)
    assert ws.cold.text == text and ws.cold.learnings == cold_format.parse_memory(text)
    assert ws.cold.run_start is None and ws.cold.appended == 0


def test_the_learnings_of_a_burst_hold_one_copy_of_each_category_before_and_after_the_fold(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A burst appends each learning under a heading line of its own; parsing each of those headings made a string
    # per learning, which the fold then kept (it reuses the learning objects): ~56 bytes per learning held.
    monkeypatch.setattr(cold_fold, "TIDY_AFTER_SECONDS", 0.05)

    def categories() -> dict[str, set[int]]:
        found: dict[str, set[int]] = {}
        for learning in ws.cold.learnings:
            found.setdefault(learning.category, set()).add(id(learning.category))
        return found

    async def burst_then_pause() -> None:
        for category, text in BURST:
            await ws.write(learn(category, text))
        assert ws.cold.run_start is not None
        assert all(len(ids) == 1 for ids in categories().values())
        await settled(ws)

    asyncio.run(burst_then_pause())
    assert ws.cold.run_start is None
    assert all(len(ids) == 1 for ids in categories().values())
    assert {"Topic 3", "Topic 7", "New topic"} <= set(categories())


def test_a_learning_appended_in_a_burst_costs_its_own_size_in_memory_not_memory_mds(
    open_alpha: Callable[..., Workspace], person_io: HookedIO
) -> None:
    # A str cannot grow in place: making the text anew at each learning copied a 1 MB MEMORY.md per learning, and
    # the heap kept holes the size of the file (the hour soak's RSS slope, torture/README.md).
    ws, memory = open_with_a_megabyte_of_memory(open_alpha, person_io)
    big = memory.read_text("utf-8")

    async def burst() -> list[int]:
        peaks = []
        for n in range(20):
            tracemalloc.reset_peak()
            before = tracemalloc.get_traced_memory()[0]
            await ws.write(learn(f"Topic {n % 3}", f"burst {n}"))
            peaks.append(tracemalloc.get_traced_memory()[1] - before)
        return peaks

    tracemalloc.start()
    try:
        peaks = asyncio.run(burst())
    finally:
        tracemalloc.stop()
    assert ws.cold.run_start is not None
    assert max(peaks[2:]) < len(big) // 4, peaks  # the first inserts and starts the run; then only blocks
    assert ws.cold.text == memory_md(ws).read_text("utf-8")


def test_a_burst_held_apart_from_the_text_gives_every_figure_the_whole_text_gives(ws: Workspace) -> None:
    """Tokens, length, the parsed learnings and the run's mark, after each learning of a burst (none of which asks
    for the text whole), are what the file on disk gives; and so is the text once asked for."""
    counter = ws.counter
    tricky = [
        ("Topic 3", "plain"),
        ("New topic", "a category of its own"),
        ("Topic 3", "with a ``` run in it"),
        ("Topic 8", "ünïcode and 😀"),
        ("New topic", "again"),
        ("Topic 1", "~~~ tildes"),
    ]

    async def burst() -> None:
        await ws.write(learn("Topic 2", "inserted: no write came just before"))
        assert ws.cold.learnings  # parsed once: the learnings are then carried, not parsed again
        for category, text in tricky * 3:
            await ws.write(learn(category, text))
            on_disk = memory_md(ws).read_text("utf-8")
            assert ws.cold.length == len(on_disk)
            assert ws.cold.tokens == counter.count(on_disk)
            parsed = ws.cold.parsed_if_any
            assert parsed is not None and parsed.items == cold_format.parse_memory(on_disk)
            assert ws.cold.run_start is not None
            assert fsio_append.run_mark(memory_md(ws)) == cold_store.mark_for(on_disk, ws.cold.run_start)
            assert not ws.cold.holds(on_disk)
        assert ws.cold.text == memory_md(ws).read_text("utf-8")
        assert ws.cold.fence_free(ws.cold.text) is False  # a block held a fence marker
        ws.folder.timer and ws.folder.timer.cancel()

    asyncio.run(burst())


def test_a_learning_while_appended_sections_are_there_is_appended_too_and_folded_with_them(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cold_fold, "TIDY_AFTER_SECONDS", 0.05)

    async def burst_then_later() -> int:
        for category, text in BURST:
            await ws.write(learn(category, text))
        ws.cold.last_write -= cold_store.FLOOD_SECONDS  # the burst is over, the fold not made yet
        inode = os.stat(memory_md(ws)).st_ino
        await ws.write(learn("Topic 7", "later"))
        assert os.stat(memory_md(ws)).st_ino == inode  # appended: inserting would fold a big file on the loop
        await settled(ws)
        return inode

    asyncio.run(burst_then_later())

    text = memory_md(ws).read_text("utf-8")
    assert text == inserted_one_by_one(BIG, [*BURST, ("Topic 7", "later")])
    assert ws.cold.learnings == cold_format.parse_memory(text)


def test_a_run_a_killed_daemon_left_is_found_at_start_joined_and_folded(
    open_alpha: Callable[..., Workspace], person_io: HookedIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even in a small file, and whatever the timing: a learning inserted above a run would reorder it."""
    monkeypatch.setattr(cold_fold, "TIDY_AFTER_SECONDS", 0.05)
    small = "# Agent Memory\n\n## A\n- [2024-01-01] a1\n"
    leftover = small + "\n## A\n- [2024-03-14] appended\n"  # a burst's, left by a daemon killed before its fold
    memory = open_alpha(ThreadPoolExecutor(1)).root / "cold" / "MEMORY.md"
    memory.write_text(leftover, encoding="utf-8")
    mark = cold_store.mark_for(leftover, len(small))  # what its append left with the blocks
    assert mark is not None
    os.setxattr(memory, fsio_append.RUN_XATTR, mark)
    ws = open_alpha(person_io)
    assert ws.cold.run_start == len(small)

    async def learn_then_pause() -> None:
        await ws.write(learn("A", "new"))
        assert memory.read_text("utf-8") == leftover + f"\n## A\n- [{DAY}] new\n"  # joined the run
        await settled(ws)

    asyncio.run(learn_then_pause())

    assert memory.read_text("utf-8") == inserted_one_by_one(small, [("A", "appended"), ("A", "new")]).replace(
        f"[{DAY}] appended", "[2024-03-14] appended"
    )
    assert ws.cold.run_start is None


def test_a_long_burst_is_folded_as_it_goes_every_appended_max_learnings(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cold_fold, "APPENDED_MAX", 3)
    monkeypatch.setattr(cold_fold, "TIDY_AFTER_SECONDS", 3600.0)  # only the count can start a fold here
    learnings = [(f"Topic {n % 4}", f"x{n}") for n in range(7)]

    async def burst() -> None:
        for category, text in learnings:
            await ws.write(learn(category, text))
            await asyncio.sleep(0)
        for _ in range(100):  # the fold the third append started, and the writes it waits for
            await asyncio.sleep(0.02)
            if not ws.folder.running:
                return

    asyncio.run(burst())

    text = memory_md(ws).read_text("utf-8")
    assert ws.cold.appended < 6  # the first learning was inserted, the next six appended: a fold came between
    assert folded(text, ws.cold.run_start) == inserted_one_by_one(BIG, learnings)  # the rest still follows it
    assert ws.cold.learnings == cold_format.parse_memory(text)


def test_learnings_appended_while_a_fold_is_made_follow_it_and_every_count_stays_exact(
    ws: Workspace, counter: TokenCounter
) -> None:
    async def fold_under_a_burst() -> bool:
        for category, text in BURST[:3]:
            await ws.write(learn(category, text))
        assert ws.cold.run_start is not None
        fold = ws.cold.prepare_fold(ws.cold.text, ws.cold.run_start)  # as the worker makes it
        assert fold is not None
        for category, text in BURST[3:]:  # meanwhile, more of the burst
            await ws.write(learn(category, text))
        folded: bool = await ws.write(lambda draft: draft.fold_cold(fold))
        return folded

    assert asyncio.run(fold_under_a_burst())

    text = memory_md(ws).read_text("utf-8")
    assert text == inserted_one_by_one(BIG, BURST[:3]) + "".join(
        f"\n## {category}\n- [{DAY}] {learning}\n" for category, learning in BURST[3:]
    )
    assert ws.cold.text == text
    assert ws.cold.tokens == counter.count(text)
    assert ws.cold.learnings == cold_format.parse_memory(text)
    assert ws.cold.run_start == len(inserted_one_by_one(BIG, BURST[:3]))  # the next fold takes the rest
    # The fold's new file is marked with the run after it: a daemon stopped or killed now still folds it later.
    assert fsio_append.run_mark(memory_md(ws)) == cold_store.mark_for(text, ws.cold.run_start)


def test_a_fold_made_before_a_persons_save_is_not_written_and_their_save_is_kept(ws: Workspace) -> None:
    async def fold_after_a_save() -> bool:
        for category, text in BURST[:2]:
            await ws.write(learn(category, text))
        assert ws.cold.run_start is not None
        fold = ws.cold.prepare_fold(ws.cold.text, ws.cold.run_start)
        assert fold is not None
        memory_md(ws).write_text(ws.cold.text.replace("learning 0 about topic 0", "edited by a person"), "utf-8")
        folded: bool = await ws.write(lambda draft: draft.fold_cold(fold))
        return folded

    assert not asyncio.run(fold_after_a_save())
    text = memory_md(ws).read_text("utf-8")
    assert "edited by a person" in text and "b1" in text and "b2" in text


def test_a_persons_save_in_the_middle_of_a_burst_is_kept_and_the_learning_still_lands_under_its_category(
    ws: Workspace, person_io: HookedIO
) -> None:
    asyncio.run(ws.write(learn("Topic 3", "b1")))
    memory = memory_md(ws)
    theirs = memory.read_text("utf-8") + "\n## Their notes\n- [2024-03-14] written by a person\n"

    def save() -> None:
        tmp = memory.with_name("MEMORY.md.swp")
        tmp.write_text(theirs, encoding="utf-8")
        os.replace(tmp, memory)

    person_io.edits.append(save)
    asyncio.run(ws.write(learn("Topic 3", "b2")))

    text = memory.read_text("utf-8")
    assert text.startswith(theirs)  # their save, whole, and memd's learning after it
    parsed = {lr.text: lr.category for lr in cold_format.parse_memory(text)}
    assert (parsed["written by a person"], parsed["b1"], parsed["b2"]) == ("Their notes", "Topic 3", "Topic 3")
    assert ws.health.replans == 1
    assert ws.cold.text == text


def test_a_persons_append_in_the_middle_of_a_burst_is_kept_once_with_memds(ws: Workspace, person_io: HookedIO) -> None:
    asyncio.run(ws.write(learn("Topic 3", "b1")))
    asyncio.run(ws.write(learn("Topic 5", "b2")))
    memory = memory_md(ws)

    def append() -> None:
        with memory.open("a", encoding="utf-8") as f:
            f.write("- [2024-03-15] appended by a person\n")

    person_io.edits.append(append)
    asyncio.run(ws.write(learn("Topic 5", "b3")))

    text = memory.read_text("utf-8")
    for line in ("b1", "b2", "appended by a person", "b3"):
        assert sum(lr.text == line for lr in cold_format.parse_memory(text)) == 1, line
    parsed = {lr.text: lr.category for lr in cold_format.parse_memory(text)}
    assert (parsed["appended by a person"], parsed["b3"]) == ("Topic 5", "Topic 5")  # under the last section
    assert ws.cold.text == text


# --- the guarded append itself (memd.fsio_batch) ----------------------------------------------------------------


def apply_day_and_learning(day: Path, memory: Path, planned: fsio.Fingerprint | None) -> None:
    """A batch of a day's append, then a learning's guarded append to MEMORY.md as planned (5 bytes, `planned`)."""
    fsio_batch.apply_writes(
        [
            fsio_batch.FileWrite(day, b"entry\n", append=True),
            fsio_batch.FileWrite(
                memory, b"- [2024-01-01] x\n", append=True, guarded=True, expected_size=5, expected_fingerprint=planned
            ),
        ]
    )


def test_a_guarded_append_to_a_file_changed_since_it_was_planned_appends_nothing_anywhere(tmp_path: Path) -> None:
    memory, day = tmp_path / "MEMORY.md", tmp_path / "day.md"
    memory.write_bytes(b"## A\n")
    planned = fsio.fingerprint(memory)
    assert planned is not None
    memory.write_bytes(b"## A\n## B\n")  # a person's save

    with pytest.raises(fsio_batch.OutsideChange):
        apply_day_and_learning(day, memory, planned)

    assert memory.read_bytes() == b"## A\n## B\n"
    assert not day.exists()  # the batch plans again: nothing of it was made


def test_a_batch_whose_later_append_fails_cuts_its_guarded_append_off_again(tmp_path: Path) -> None:
    memory, day = tmp_path / "MEMORY.md", tmp_path / "day.md"
    memory.write_bytes(b"## A\n")
    day.mkdir()  # the day's append fails after the guarded one was made
    planned = fsio.fingerprint(memory)

    with pytest.raises(OSError):
        apply_day_and_learning(day, memory, planned)

    assert memory.read_bytes() == b"## A\n"


def test_an_append_is_not_cut_off_once_someone_else_wrote_after_it(tmp_path: Path) -> None:
    memory = tmp_path / "MEMORY.md"
    memory.write_bytes(b"## A\n")
    after = fsio.durable_append(memory, b"- [2024-01-01] memd's\n")
    with memory.open("ab") as f:
        f.write(b"- [2024-01-01] someone else's\n")

    assert not fsio_append.undo_append(memory, 5, after)
    assert memory.read_bytes() == b"## A\n- [2024-01-01] memd's\n- [2024-01-01] someone else's\n"
    before = memory.read_bytes()
    fresh = fsio.durable_append(memory, b"- [2024-01-01] another\n")
    assert fsio_append.undo_append(memory, len(before), fresh)  # alone after it: cut
    assert memory.read_bytes() == before


def test_a_workspace_closed_in_the_middle_of_a_burst_leaves_memory_md_folded(ws: Workspace) -> None:
    async def burst_then_stop() -> None:
        for category, text in BURST:
            await ws.write(learn(category, text))
        assert ws.cold.run_start is not None
        await ws.close()  # what the daemon does at SIGTERM, long before the fold's 2 s are up

    asyncio.run(burst_then_stop())

    assert memory_md(ws).read_text("utf-8") == inserted_one_by_one(BIG, BURST)
    assert ws.folder.timer is None


def test_a_file_restored_with_its_run_mark_is_memds_run_again_and_folded_without_a_further_learning(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a restore of a snapshot taken in a burst writes (memd.snapshot_history): the snapshot's text, marked
    with the run its commit recorded (git keeps no extended attributes)."""
    monkeypatch.setattr(cold_fold, "TIDY_AFTER_SECONDS", 0.05)
    base = inserted_one_by_one(BIG, [("Topic 3", "r1")])
    restored = base + "\n## Topic 3\n- [2024-03-14] r2\n\n## Brand new\n- [2024-03-14] r3\n"
    mark = cold_store.mark_for(restored, len(base))
    assert mark is not None

    async def restore_then_pause() -> None:
        await ws.restore_files({"cold/MEMORY.md": restored.encode()}, ["cold"], marks={"cold/MEMORY.md": mark})
        assert ws.cold.run_start == len(base)
        assert fsio_append.run_mark(memory_md(ws)) == mark
        await settled(ws)

    asyncio.run(restore_then_pause())

    assert memory_md(ws).read_text("utf-8") == folded(restored, len(base))
    assert memory_md(ws).read_text("utf-8").count("\n## Topic 3\n") == 1


def test_a_restore_to_the_bytes_the_file_holds_already_still_marks_its_run(ws: Workspace) -> None:
    text = BIG + "\n## Topic 3\n- [2024-03-14] r2\n"
    memory_md(ws).write_text(text, encoding="utf-8")  # the same bytes, unmarked (a copy, an older memd's restore)
    mark = cold_store.mark_for(text, len(BIG))
    assert mark is not None

    async def restore() -> list[str]:
        changed = await ws.restore_files({"cold/MEMORY.md": text.encode()}, ["cold"], marks={"cold/MEMORY.md": mark})
        ws.folder.timer and ws.folder.timer.cancel()
        return changed

    assert asyncio.run(restore()) == []
    assert fsio_append.run_mark(memory_md(ws)) == mark
    assert ws.cold.run_start == len(BIG)


def test_a_restored_run_longer_than_the_run_held_is_taken_whole(ws: Workspace) -> None:
    """The file restored ends with the run memd holds, and the mark names more of it: the earlier blocks are
    memd's too (a snapshot taken earlier in the same burst), never a person's sections."""

    async def burst_then_restore() -> None:
        for category, text in BURST[:3]:
            await ws.write(learn(category, text))
        held = ws.cold.text[ws.cold.run_start :]
        restored = BIG + "\n## Topic 9\n- [2024-03-14] older\n" + held
        mark = cold_store.mark_for(restored, len(BIG))
        assert mark is not None
        await ws.restore_files({"cold/MEMORY.md": restored.encode()}, ["cold"], marks={"cold/MEMORY.md": mark})
        assert ws.cold.run_start == len(BIG)
        ws.folder.timer and ws.folder.timer.cancel()

    asyncio.run(burst_then_restore())


# --- what the first design of bursts got wrong (each found in review) ----------------------------------------------


def test_a_burst_that_ends_on_a_new_category_is_folded_too(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cold_fold, "TIDY_AFTER_SECONDS", 0.05)
    learnings = [("Topic 3", "b1"), ("Topic 3", "b2"), ("Brand new", "b3")]

    async def burst_then_pause() -> None:
        for category, text in learnings:
            await ws.write(learn(category, text))
        await settled(ws)

    asyncio.run(burst_then_pause())

    assert memory_md(ws).read_text("utf-8") == inserted_one_by_one(BIG, learnings)


def test_a_learning_with_a_backtick_run_mid_burst_is_appended_and_folded_with_the_rest(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cold_fold, "TIDY_AFTER_SECONDS", 0.05)
    learnings = [("Topic 3", "b1"), ("Topic 3", "wrap code in ``` blocks"), ("Topic 3", "b3"), ("Topic 5", "b4")]

    async def burst_then_pause() -> set[int]:
        inodes = set()
        for category, text in learnings:
            await ws.write(learn(category, text))
            inodes.add(os.stat(memory_md(ws)).st_ino)
        await settled(ws)
        return inodes

    assert len(asyncio.run(burst_then_pause())) == 1  # the first inserted, every later one appended
    assert memory_md(ws).read_text("utf-8") == inserted_one_by_one(BIG, learnings)


def test_a_fold_dropped_for_a_persons_save_is_made_again_from_their_file(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cold_fold, "TIDY_AFTER_SECONDS", 0.05)

    async def burst_save_pause() -> None:
        for category, text in BURST:
            await ws.write(learn(category, text))
        memory_md(ws).write_text(ws.cold.text.replace("learning 0 about topic 0", "edited by a person"), "utf-8")
        await settled(ws)
        await asyncio.sleep(0.3)  # the fold made before the save is dropped; the one armed after it runs
        await settled(ws)

    asyncio.run(burst_save_pause())

    expected = inserted_one_by_one(BIG.replace("learning 0 about topic 0", "edited by a person"), BURST)
    assert memory_md(ws).read_text("utf-8") == expected
    assert ws.cold.run_start is None


def test_a_big_file_that_may_hold_a_fence_gets_its_learnings_inserted_in_order(ws: Workspace) -> None:
    fenced = BIG.replace("## Topic 1\n", "## Topic 1\n```\n## Topic 3\n```\n", 1)
    memory_md(ws).write_text(fenced, "utf-8")

    async def burst() -> None:
        for category, text in BURST:
            await ws.write(learn(category, text))
            assert ws.cold.run_start is None

    asyncio.run(burst())

    assert memory_md(ws).read_text("utf-8") == inserted_one_by_one(fenced, BURST)


def test_an_edit_other_than_a_learning_folds_the_run_first(ws: Workspace) -> None:
    async def burst_then_edit() -> None:
        for category, text in BURST:
            await ws.write(learn(category, text))
        await ws.write(lambda draft: draft.edit_cold())  # what accepting a proposal starts with

    asyncio.run(burst_then_edit())

    assert memory_md(ws).read_text("utf-8") == inserted_one_by_one(BIG, BURST)
    assert ws.cold.run_start is None and ws.cold.text == memory_md(ws).read_text("utf-8")


def test_a_save_between_the_check_and_the_append_gets_none_of_memds_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The append is checked on the descriptor it writes through: a check by path, then an open, let a person's
    save in between receive memd's learning, while memd believed its own text was the file."""
    memory = tmp_path / "MEMORY.md"
    memory.write_bytes(b"## A\n")
    planned = fsio.fingerprint(memory)
    assert planned is not None
    check_dir = fsio._refuse_symlinked_dir

    def save_first(directory: Path) -> None:  # runs right before the open
        tmp = tmp_path / "MEMORY.md.swp"
        tmp.write_bytes(b"## A\n## B by a person\n")
        os.replace(tmp, memory)
        check_dir(directory)

    monkeypatch.setattr(fsio_append, "_refuse_symlinked_dir", save_first)

    with pytest.raises(fsio_append.NotAsExpected):
        fsio_append.guarded_append(memory, b"- [2024-01-01] x\n", planned)

    assert memory.read_bytes() == b"## A\n## B by a person\n"


def test_a_writer_that_got_in_during_the_append_keeps_its_bytes_and_memds_come_off_or_stand(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = tmp_path / "MEMORY.md"
    write_all = fsio._write_all

    def with_theirs(first: bool) -> Callable[[int, bytes], None]:
        def write(fd: int, data: bytes) -> None:
            if not first:
                write_all(fd, data)
            with memory.open("ab") as f:
                f.write(b"- theirs\n")
            if first:
                write_all(fd, data)

        return write

    memory.write_bytes(b"## A\n")
    planned = fsio.fingerprint(memory)
    assert planned is not None
    monkeypatch.setattr(fsio_append, "_write_all", with_theirs(first=True))
    with pytest.raises(fsio_append.NotAsExpected):  # theirs, then memd's: memd's cut off, the batch plans again
        fsio_append.guarded_append(memory, b"- memd's\n", planned)
    assert memory.read_bytes() == b"## A\n- theirs\n"

    memory.write_bytes(b"## A\n")
    planned = fsio.fingerprint(memory)
    assert planned is not None
    monkeypatch.setattr(fsio_append, "_write_all", with_theirs(first=False))
    after, size_before = fsio_append.guarded_append(memory, b"- memd's\n", planned)  # memd's, then theirs: both stay
    assert memory.read_bytes() == b"## A\n- memd's\n- theirs\n"
    assert size_before == 5
    assert after != fsio.fingerprint(memory)  # so the store reads the file again before it plans on it


def test_a_persons_trailing_section_like_a_block_is_never_taken_for_a_run(
    open_alpha: Callable[..., Workspace], person_io: HookedIO
) -> None:
    """A section a person wrote at the end, one learning under a heading an earlier section has, is what memd's
    blocks look like: only the file's mark says a run is memd's. Opened, learned into and closed: it stays."""
    theirs = "# Agent Memory\n\n## Deploy\n- [2024-01-01] a1\n\n## Deploy\n- [2024-01-02] by hand, on purpose\n"
    memory = open_alpha(ThreadPoolExecutor(1)).root / "cold" / "MEMORY.md"
    memory.write_text(theirs, encoding="utf-8")
    ws = open_alpha(person_io)
    assert ws.cold.run_start is None

    async def learn_then_close() -> None:
        await ws.write(learn("Other", "x"))
        await ws.close()

    asyncio.run(learn_then_close())

    assert memory.read_text("utf-8") == cold_format.insert_learning(theirs, "Other", DAY, "x")


def test_a_mark_is_a_run_only_where_the_file_ends_with_exactly_that_run(
    open_alpha: Callable[..., Workspace], person_io: HookedIO
) -> None:
    """A person's `>>` after the run, a mark left by an append that was cut off again under a person's section of
    the same shape, a mark of another length, garbage: none is taken for a run, and nothing of theirs moves."""
    base = "# Agent Memory\n\n## A\n- [2024-01-01] a1\n"
    run = "\n## A\n- [2024-01-02] a2\n"
    memory = open_alpha(ThreadPoolExecutor(1)).root / "cold" / "MEMORY.md"
    cases = {
        "their >> after it": (base + run + "- [2024-01-03] by hand\n", cold_store.mark_for(base + run, len(base))),
        "cut, then theirs": (base + "\n## A\n- [2024-01-02] theirs\n", cold_store.mark_for(base + run, len(base))),
        "cut, then theirs alike": (base + "\n## A\n- [2024-01-02] b2\n", cold_store.mark_for(base + run, len(base))),
        "too long": (base + run, f"{len(base + run) + 5}:".encode() + b"0" * 32),
        "garbage": (base + run, b"x"),
    }
    for case, (text, mark) in cases.items():
        assert mark is not None
        memory.write_text(text, encoding="utf-8")
        os.setxattr(memory, fsio_append.RUN_XATTR, mark)
        assert open_alpha(person_io).cold.run_start is None, case

    memory.write_text(base + run, encoding="utf-8")
    os.setxattr(memory, fsio_append.RUN_XATTR, cold_store.mark_for(base + run, len(base)) or b"")
    assert open_alpha(person_io).cold.run_start == len(base)  # the same file as memd left it: its run


def test_a_failed_edit_in_a_batch_leaves_the_run_as_it_was(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    """An edit that folds in the draft (accepting a proposal) or learns, then raises: the batch's other requests
    go on from the draft as it was before that edit, run included."""
    monkeypatch.setattr(cold_fold, "TIDY_AFTER_SECONDS", 0.05)

    def fold_then_fail(draft: Draft) -> None:
        draft.edit_cold()
        raise ValueError("a proposal dated 2024-02-30")

    def learn_then_fail(draft: Draft) -> None:
        draft.learn("Topic 9", "never acknowledged")
        raise ValueError("refused")

    async def burst_with_failures() -> None:
        for category, text in BURST[:2]:
            await ws.write(learn(category, text))
        for failing in (fold_then_fail, learn_then_fail):
            name = failing.__name__
            # The first write goes alone; the three after it are queued while it is written: one batch, where the
            # failing edit comes after a learning that joined the run.
            first = asyncio.ensure_future(ws.write(learn("Topic 1", f"ahead of {name}")))
            await asyncio.sleep(0)
            batch = [
                ws.write(learn("Topic 5", f"before {name}")),
                ws.write(failing),
                ws.write(learn("Topic 7", f"after {name}")),
            ]
            results = await asyncio.gather(first, *batch, return_exceptions=True)
            assert isinstance(results[2], ValueError)
            assert not any(isinstance(r, BaseException) for n, r in enumerate(results) if n != 2)
            assert ws.cold.run_start is not None and ws.cold.run_start < len(ws.cold.text)
        await settled(ws)

    asyncio.run(burst_with_failures())

    learnings = [*BURST[:2]]
    for name in ("fold_then_fail", "learn_then_fail"):
        learnings += [("Topic 1", f"ahead of {name}"), ("Topic 5", f"before {name}"), ("Topic 7", f"after {name}")]
    assert memory_md(ws).read_text("utf-8") == inserted_one_by_one(BIG, learnings)
    assert ws.cold.run_start is None


def test_a_close_cancelled_while_it_folds_still_closes_the_writer(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepare = cold_store.ColdStore.prepare_fold

    def slow_prepare(self: cold_store.ColdStore, text: str, run_start: int) -> cold_folds.Fold | None:
        time.sleep(0.3)
        return prepare(self, text, run_start)

    monkeypatch.setattr(cold_store.ColdStore, "prepare_fold", slow_prepare)

    async def burst_then_cancelled_close() -> None:
        for category, text in BURST:
            await ws.write(learn(category, text))
        closing = asyncio.ensure_future(ws.close())
        await asyncio.sleep(0.05)
        closing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await closing
        with pytest.raises(ShuttingDown):
            await ws.write(learn("Topic 1", "after the stop"))

    asyncio.run(burst_then_cancelled_close())


def test_a_save_by_rename_during_the_append_gets_the_batch_planned_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vim's save: the file memd appends to is renamed away (MEMORY.md~) and theirs put in its place. memd's
    bytes come off the old file and the batch plans again on theirs: the learning is not acknowledged into a
    file nobody reads."""
    memory = tmp_path / "MEMORY.md"
    memory.write_bytes(b"## A\n")
    planned = fsio.fingerprint(memory)
    assert planned is not None
    write_all = fsio._write_all

    def save_then_write(fd: int, data: bytes) -> None:
        os.rename(memory, tmp_path / "MEMORY.md~")
        (tmp_path / "MEMORY.md").write_bytes(b"## A\n## B by a person\n")
        write_all(fd, data)

    monkeypatch.setattr(fsio_append, "_write_all", save_then_write)

    with pytest.raises(fsio_append.NotAsExpected):
        fsio_append.guarded_append(memory, b"- memd's\n", planned)

    assert memory.read_bytes() == b"## A\n## B by a person\n"
    assert (tmp_path / "MEMORY.md~").read_bytes() == b"## A\n"


def test_a_rewrite_in_place_during_the_append_gets_the_batch_planned_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = tmp_path / "MEMORY.md"
    memory.write_bytes(b"## A\n- [2024-01-01] a long learning someone is about to shorten\n")
    planned = fsio.fingerprint(memory)
    assert planned is not None
    write_all = fsio._write_all

    for theirs in (b"## A\n- short\n", b"## A\n- [2024-01-01] a longer learning, rewritten in place by hand\n"):

        def write_then_rewrite(fd: int, data: bytes, theirs: bytes = theirs) -> None:
            write_all(fd, data)
            memory.write_bytes(theirs)  # truncated and written in place, memd's bytes with it

        monkeypatch.setattr(fsio_append, "_write_all", write_then_rewrite)
        before = memory.read_bytes()
        planned = fsio.fingerprint(memory)
        assert planned is not None

        with pytest.raises(fsio_append.NotAsExpected):
            fsio_append.guarded_append(memory, b"- memd's\n", planned)

        assert memory.read_bytes() == theirs, before


def test_memds_bytes_kept_by_others_around_them_stand_and_are_not_written_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A script appending around memd's append, a tool that read memd's bytes and saved the file by rename: the
    learning is in the file once; a replan would have written it a second time."""
    memory = tmp_path / "MEMORY.md"
    write_all = fsio._write_all
    data = b"\n## A\n- [2024-01-01] memd's\n"

    def around(fd: int, data: bytes) -> None:
        with memory.open("ab") as f:
            f.write(b"- X\n")
        write_all(fd, data)
        with memory.open("ab") as f:
            f.write(b"- Y\n")

    def kept_by_a_tool(fd: int, data: bytes) -> None:
        write_all(fd, data)
        tmp = tmp_path / "MEMORY.md.tool"
        tmp.write_bytes(memory.read_bytes() + b"- formatted\n")
        os.replace(tmp, memory)

    for hook, expected in (
        (around, b"## A\n- X\n" + data + b"- Y\n"),
        (kept_by_a_tool, b"## A\n" + data + b"- formatted\n"),
    ):
        memory.write_bytes(b"## A\n")
        planned = fsio.fingerprint(memory)
        assert planned is not None
        monkeypatch.setattr(fsio_append, "_write_all", hook)

        after, size_before = fsio_append.guarded_append(memory, data, planned)

        assert memory.read_bytes() == expected, hook.__name__
        assert size_before == 5
        assert after != fsio.fingerprint(memory)  # the store reads the file again before it plans on it


def test_a_run_is_folded_in_a_worker_on_demand_before_an_edit_that_would_fold_it_on_the_loop(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What accepting a proposal does first (memd.handlers.proposals): its draft then has no run to fold."""
    monkeypatch.setattr(cold_fold, "TIDY_AFTER_SECONDS", 3600.0)  # no timer would fold it here
    folds_in_a_draft: list[int] = []
    edit_cold = Draft.edit_cold

    def counted(draft: Draft) -> str:
        draft._edit_cold()
        if draft.cold_run_start is not None:
            folds_in_a_draft.append(draft.cold_run_start)
        return edit_cold(draft)

    monkeypatch.setattr(Draft, "edit_cold", counted)

    async def burst_then_accept() -> None:
        for category, text in BURST:
            await ws.write(learn(category, text))
        assert ws.cold.run_start is not None
        await ws.fold_appended()
        assert ws.cold.run_start is None
        await ws.write(lambda draft: draft.edit_cold())

    asyncio.run(burst_then_accept())

    assert folds_in_a_draft == []
    assert memory_md(ws).read_text("utf-8") == inserted_one_by_one(BIG, BURST)


def test_a_restore_marks_the_file_with_the_newest_recorded_mark_that_names_its_run_and_with_no_other() -> None:
    base = "# Agent Memory\n\n## A\n- [2024-03-14] a\n"
    restored = base + "\n## A\n- [2024-03-15] appended\n"
    mark = cold_store.mark_for(restored, len(base))
    assert mark is not None
    stale = cold_store.mark_for(restored + "\n## B\n- [2024-03-15] cut off again\n", len(base))
    assert stale is not None
    data = restored.encode()

    assert snapshot_history._run_mark_of(data, [stale.decode(), mark.decode()]) == mark  # an older commit's
    assert snapshot_history._run_mark_of(data, [stale.decode(), "garbage", "5:"]) is None
    assert snapshot_history._run_mark_of(data, []) is None
    assert snapshot_history._run_mark_of(b"\xff" + data, [mark.decode()]) is None  # not UTF-8: no run


# --- the text a fold wrote, let go of and read back (memd.tiers.cold_store.Released) -------------------------------

SECOND_BURST = [("Topic 5", "s1"), ("Topic 3", "s2"), ("Another topic", "s3")]


def test_the_text_a_fold_of_a_big_file_wrote_is_not_held_in_memory_once_written(
    open_alpha: Callable[..., Workspace], person_io: HookedIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Held, it was a second copy of MEMORY.md beside the learnings' arena: ~39 bytes a learning that the hour soak's
    # bursts add 72,000 of an hour (its RSS slope, torture/README.md).
    monkeypatch.setattr(cold_fold, "TIDY_AFTER_SECONDS", 0.05)
    ws, memory = open_with_a_megabyte_of_memory(open_alpha, person_io)
    big = memory.read_text("utf-8")

    async def burst_and_fold() -> None:
        for category, text in BURST:
            await ws.write(learn(category, text))
        await settled(ws)

    tracemalloc.start()
    try:
        asyncio.run(burst_and_fold())
        held = tracemalloc.get_traced_memory()[0]  # what the burst and its fold left allocated
    finally:
        tracemalloc.stop()
    assert ws.cold.run_start is None and ws.cold.released is not None
    assert held < len(big) // 4, held  # the folded text (1.1 MB, made under tracing) is not among it
    assert ws.cold.text == memory.read_text("utf-8") == inserted_one_by_one(big, BURST)


def test_a_burst_after_a_fold_appends_without_reading_the_text_back_and_the_next_fold_reads_it_once_in_a_worker(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cold_fold, "TIDY_AFTER_SECONDS", 0.05)
    reads: list[threading.Thread] = []
    read_tier_start = cold_store.read_tier_start

    def recorded(path: Path, size: int) -> bytes | None:
        reads.append(threading.current_thread())
        return read_tier_start(path, size)

    monkeypatch.setattr(cold_store, "read_tier_start", recorded)

    async def two_bursts() -> None:
        for category, text in BURST:
            await ws.write(learn(category, text))
        await settled(ws)
        released = ws.cold.released
        assert released is not None and released.chars == len(inserted_one_by_one(BIG, BURST))
        for category, text in SECOND_BURST:
            await ws.write(learn(category, text))
            on_disk = memory_md(ws).read_text("utf-8")
            assert ws.cold.released is released and ws.cold.run_start is not None  # appended after it
            assert ws.cold.length == len(on_disk) and ws.cold.tokens == ws.counter.count(on_disk)
            assert ws.cold.learnings == cold_format.parse_memory(on_disk)
            assert fsio_append.run_mark(memory_md(ws)) == cold_store.mark_for(on_disk, ws.cold.run_start)
        assert reads == []
        await settled(ws)

    asyncio.run(two_bursts())

    assert len(reads) == 1 and reads[0] is not threading.main_thread()  # the fold's, in a worker
    text = memory_md(ws).read_text("utf-8")
    assert text == inserted_one_by_one(BIG, BURST + SECOND_BURST)
    assert ws.cold.released is not None and ws.cold.released.chars == len(text)  # let go of again
    assert ws.cold.learnings == cold_format.parse_memory(text) and ws.cold.tokens == ws.counter.count(text)
    assert ws.cold.text == text and len(reads) == 2


def test_a_save_a_plan_finds_when_it_reads_the_text_back_gets_the_batch_planned_again_on_it(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The save landed between the batch's check of the file and the read-back (the check's fingerprint is made to
    match here): the text memd let go of is not there to plan on, so the batch is planned on theirs."""
    monkeypatch.setattr(cold_fold, "TIDY_AFTER_SECONDS", 0.05)

    async def burst_then_save_then_learn() -> None:
        for category, text in BURST:
            await ws.write(learn(category, text))
        await settled(ws)
        assert ws.cold.released is not None
        theirs = memory_md(ws).read_text("utf-8").replace("learning 0 about topic 0", "LEARNING 0 ABOUT TOPIC 0")
        memory_md(ws).write_text(theirs, "utf-8")  # the same size: only the bytes tell
        ws.cold.fingerprint = fsio.fingerprint(memory_md(ws))
        ws.cold.last_write = -math.inf  # no burst: the learning goes under its section, which needs the text
        await ws.write(learn("Topic 5", "after their save"))

    asyncio.run(burst_then_save_then_learn())

    theirs = inserted_one_by_one(BIG, BURST).replace("learning 0 about topic 0", "LEARNING 0 ABOUT TOPIC 0")
    text = memory_md(ws).read_text("utf-8")
    assert text == inserted_one_by_one(theirs, [("Topic 5", "after their save")])
    assert ws.health.replans == 1
    assert ws.cold.text == text and ws.cold.learnings == cold_format.parse_memory(text)
    assert ws.cold.tokens == ws.counter.count(text)


async def learn_all(ws: Workspace, learnings: list[tuple[str, str]]) -> None:
    for category, text in learnings:
        await ws.write(learn(category, text))


async def save_between_folds(ws: Workspace, replacing: tuple[str, str], fingerprint_hidden: bool) -> str:
    """A burst folded (its text let go of), a second burst appended after it, a person's save of the file with
    `replacing` made, a fold that reads the start back, one more learning, a fold. Returns what they saved."""
    await learn_all(ws, BURST)
    await ws.folder.fold()
    assert ws.cold.released is not None
    await learn_all(ws, SECOND_BURST)
    theirs = memory_md(ws).read_text("utf-8").replace(*replacing)
    memory_md(ws).write_text(theirs, "utf-8")
    if fingerprint_hidden:  # a save of the same size within the clock's tick: its fingerprint tells nothing
        ws.cold.fingerprint = fsio.fingerprint(memory_md(ws))
    await ws.folder.fold()  # reads back a start that is no longer there
    assert memory_md(ws).read_text("utf-8") == theirs
    await ws.write(learn("Topic 5", "after their save"))  # reads their file, then appends to its run
    await ws.folder.fold()
    return theirs


def assert_folded_on_their_save(ws: Workspace, theirs: str) -> None:
    text = memory_md(ws).read_text("utf-8")
    start = theirs.rindex(f"\n## Topic 5\n- [{DAY}] s1\n")  # where the second burst's run begins in their file
    assert text == inserted_one_by_one(theirs[:start], [*SECOND_BURST, ("Topic 5", "after their save")])
    assert ws.cold.learnings == cold_format.parse_memory(text) and ws.cold.tokens == ws.counter.count(text)
    assert ws.cold.run_start is None and ws.cold.text == text


def test_a_fold_that_finds_the_text_it_let_go_of_changed_writes_nothing_and_the_next_batch_plans_on_the_save(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(cold_fold, "TIDY_AFTER_SECONDS", 3600.0)  # the test starts each fold itself
    edit = ("learning 0 about topic 0", "edited by a person")

    theirs = asyncio.run(save_between_folds(ws, edit, fingerprint_hidden=False))

    assert_folded_on_their_save(ws, theirs)
    assert ws.health.replans == 0  # their file was read before anything was planned on it
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_save_a_fold_finds_where_the_fingerprint_told_nothing_is_read_by_the_next_batch_and_folded(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the read-back's digest tells: the batch after the fold reads their file (before: it went on appending
    to memd's view, and every fold after gave up again)."""
    monkeypatch.setattr(cold_fold, "TIDY_AFTER_SECONDS", 3600.0)
    edit = ("learning 0 about topic 0", "LEARNING 0 ABOUT TOPIC 0")  # the same size

    theirs = asyncio.run(save_between_folds(ws, edit, fingerprint_hidden=True))

    assert_folded_on_their_save(ws, theirs)


def test_a_commit_of_a_whole_text_while_the_start_is_let_go_of_takes_the_text_as_it_is(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No plan does this (one that edits the text reads it back first); the store still counts what it is given."""
    monkeypatch.setattr(cold_fold, "TIDY_AFTER_SECONDS", 3600.0)

    async def burst_and_fold() -> None:
        await learn_all(ws, BURST)
        await ws.folder.fold()

    asyncio.run(burst_and_fold())
    assert ws.cold.released is not None
    text = inserted_one_by_one(memory_md(ws).read_text("utf-8"), [("Topic 9", "given whole")])
    data = text.encode("utf-8")
    memory_md(ws).write_bytes(data)
    write = fsio_batch.FileWrite(memory_md(ws), data, append=False, guarded=False)
    fp = fsio.fingerprint(memory_md(ws))
    assert fp is not None

    ws.cold.commit(text, write, fp)

    assert ws.cold.released is None and ws.cold.text == text and ws.cold.length == len(text)
    assert ws.cold.tokens == ws.counter.count(text)
    assert ws.cold.learnings == cold_format.parse_memory(text)
