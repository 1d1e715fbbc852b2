"""Workspace: what a refresh before a read reports as changed, what `looks_changed` notices, one adoption at a time,
and the swapped-directory check's message and log. A person's edits are real writes to the files; a batch or an
adoption is held in flight by a real I/O thread that a test keeps busy."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from edits import note

from memd.errors import StorageError
from memd.tiers import warm_format
from memd.workspace import Workspace


@pytest.fixture
def one_io() -> Iterator[ThreadPoolExecutor]:
    """A single I/O thread, so that a job a test puts in front keeps memd's own work waiting behind it."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="test-one-io") as executor:
        yield executor


@pytest.fixture
def ws(open_alpha: Callable[..., Workspace], io: ThreadPoolExecutor) -> Workspace:
    workspace: Workspace = open_alpha(io)
    asyncio.run(workspace.write(note("first")))  # hot, today's warm day
    asyncio.run(workspace.write(lambda d: d.learn("Testing", "run the slow suite before a release")))
    return workspace


def today_file(ws: Workspace) -> Path:
    return ws.root / "warm" / warm_format.day_filename(ws.today())


def append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(text)


def edit_hot(ws: Workspace) -> None:
    path = ws.root / "hot" / "context.json"  # the article's file; memd's own keys are in hot/memd.json
    text = path.read_text(encoding="utf-8")
    assert '"task": ""' in text
    path.write_text(text.replace('"task": ""', '"task": "set by hand"'), encoding="utf-8")


def edit_warm(ws: Workspace) -> None:
    append(today_file(ws), "\n## 23:59:00 - a person's line\n")


def edit_cold(ws: Workspace) -> None:
    append(ws.root / "cold" / "MEMORY.md", "- [2026-03-21] a person's learning\n")


def edit_proposals(ws: Workspace) -> None:
    append(ws.root / "cold" / "PROPOSED.md", "\n")


# --- which tiers a refresh reports ------------------------------------------------------------------------------------


def test_nothing_changed_refreshes_nothing(ws: Workspace) -> None:
    assert ws.looks_changed() is False
    assert ws.refresh() == set()


@pytest.mark.parametrize(
    ("edit", "tier"),
    [(edit_hot, "hot"), (edit_warm, "warm"), (edit_cold, "cold"), (edit_proposals, "cold")],
    ids=["context.json", "warm day", "MEMORY.md", "PROPOSED.md"],
)
def test_a_persons_edit_of_one_file_is_noticed_and_refreshes_exactly_its_tier(
    ws: Workspace, edit: Callable[[Workspace], None], tier: str
) -> None:
    edit(ws)

    assert ws.looks_changed() is True
    assert ws.refresh() == {tier}
    assert ws.looks_changed() is False
    assert ws.refresh() == set()


def test_a_cold_edit_during_a_batch_that_writes_only_hot_is_refreshed_and_the_batchs_own_file_is_not(
    open_alpha: Callable[..., Workspace], one_io: ThreadPoolExecutor
) -> None:
    ws = open_alpha(one_io)
    asyncio.run(ws.write(lambda d: d.learn("Testing", "run the slow suite before a release")))
    asyncio.run(ws.write(note("first")))

    async def go() -> tuple[set[str], set[str]]:
        gate = threading.Event()
        one_io.submit(gate.wait)  # the I/O thread is busy: the next batch waits in flight
        writing = asyncio.ensure_future(ws.write(note("second")))
        while ws.writer.in_flight is None:
            await asyncio.sleep(0.001)
        edit_cold(ws)
        edit_hot(ws)
        during = ws.refresh()
        gate.set()
        await writing
        return during, ws.refresh()

    during, after = asyncio.run(go())

    assert during == {"cold"}  # hot is left to the batch in flight: its new fingerprints are memd's own
    assert "a person's learning" in ws.cold.text
    assert after == {"hot"}  # the batch wrote only hot/memd.json: the person's context.json is adopted now
    assert ws.hot.doc["task"] == "set by hand"
    assert [n["text"] for n in ws.hot.doc["notes"]] == ["first", "second"]


# --- one adoption at a time ------------------------------------------------------------------------------------------


def test_while_an_adoption_reads_in_a_worker_reads_serve_the_last_state_and_a_second_adoption_does_nothing(
    open_alpha: Callable[..., Workspace], one_io: ThreadPoolExecutor
) -> None:
    ws = open_alpha(one_io)
    asyncio.run(ws.write(note("first")))

    async def go() -> tuple[set[str], set[str], set[str]]:
        gate = threading.Event()
        one_io.submit(gate.wait)
        edit_hot(ws)
        adopting = asyncio.ensure_future(ws.adopt())
        await asyncio.sleep(0.05)  # adopt() is waiting for the busy I/O thread
        during = ws.refresh()
        second = asyncio.ensure_future(ws.adopt())
        await asyncio.sleep(0.01)
        second_done = second.done()  # at once: it neither waits for the first nor reads anything
        gate.set()
        assert second_done
        return during, await second, await adopting

    during, second, adopted = asyncio.run(go())

    assert during == set() and second == set()
    assert adopted == {"hot"}
    assert ws.hot.doc["task"] == "set by hand"


def test_after_an_adoption_the_next_edit_is_refreshed_again(ws: Workspace) -> None:
    edit_warm(ws)
    assert asyncio.run(ws.adopt()) == {"warm"}

    edit_hot(ws)

    assert ws.refresh() == {"hot"}


# --- the swapped-directory check ----------------------------------------------------------------------------------


def test_a_swapped_directory_is_refused_with_its_reason_logged_once_and_cleared_when_it_is_back(
    ws: Workspace, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="memd.workspace")
    moved = ws.root.with_name("moved-away")
    ws.root.rename(moved)
    ws.root.mkdir()

    for _ in range(3):
        with pytest.raises(StorageError) as refused:
            ws.check_identity()
    assert ws.refresh() == set()

    expected = (
        f"workspace 'alpha': workspace directory {ws.root} is no longer the directory memd opened (another was "
        "moved into its place); put it back, or restart memd to adopt the new one"
    )
    assert refused.value.message == expected == ws.health.identity_error
    assert refused.value.data == {"errno": 116, "path": str(ws.root)}
    ws.root.rmdir()
    moved.rename(ws.root)
    ws.check_identity()

    assert ws.health.identity_error == ""
    assert [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "memd.workspace"] == [
        ("ERROR", expected),
        ("INFO", "workspace alpha: its directory is the one memd opened again"),
    ]
