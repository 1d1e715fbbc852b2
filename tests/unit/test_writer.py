"""Specification of the writer's own decisions (memd.writer): when it gives up planning a batch again, how long it
waits for a file someone holds open, what a failed disk write tells the client and status, and that a listener
or a metrics hook failing never costs a client its acknowledgement. Everything runs on a real workspace, real
files and a real I/O thread; only the moments a person acts are chosen by the test (PersonEveryAttempt)."""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from clocks import START
from edits import note
from hot_files import own_file, read_hot

from memd import fsio, fsio_batch, writer
from memd.errors import Busy, ShuttingDown, StorageError
from memd.retention import Held
from memd.workspace import Workspace

HANG = 30.0  # seconds: only a writer that never ends its batch gets near this (a hang detector, not a timing check)


class PersonEveryAttempt(ThreadPoolExecutor):
    """An I/O executor that runs `before_each` right before every batch's writes: a person saving a file between
    memd's planning and its publishing, at each attempt for as long as the test wants."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="test-io")
        self.before_each: Callable[[], None] | None = None
        self.attempts = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        hook = self.before_each

        def run() -> Any:
            if hook is not None and fn is fsio_batch.write_batch:
                self.attempts += 1
                hook()
            return fn(*args, **kwargs)

        return super().submit(run)


class FailingSink:
    """A change sink whose `changed` always raises, as a listener with a bug would."""

    def __init__(self) -> None:
        self.calls = 0

    def registered(self, ws: Workspace) -> None:
        pass

    def changed(self, ws: Workspace, tiers: frozenset[str], origin: str) -> None:
        self.calls += 1
        raise RuntimeError("listener bug")

    async def before_destructive(self, ws: Workspace, why: str, days: Sequence[str] = ()) -> Held | None:
        return None


@pytest.fixture
def io() -> Iterator[PersonEveryAttempt]:
    executor = PersonEveryAttempt()
    yield executor
    executor.shutdown()


@pytest.fixture
def ws(open_alpha: Callable[..., Workspace], io: PersonEveryAttempt) -> Workspace:
    return open_alpha(io)


def write(ws: Workspace, *edits: Callable[..., Any]) -> list[Any]:
    async def go() -> list[Any]:
        return list(await asyncio.wait_for(asyncio.gather(*(ws.write(e) for e in edits), return_exceptions=True), HANG))

    return asyncio.run(go())


def messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == writer.__name__ and r.levelno == level]


def rewrite_each_time(path: Path) -> Callable[[], None]:
    """A tool that rewrites `path` (rename over) before every one of memd's attempts, each time differently."""
    count = 0

    def save() -> None:
        nonlocal count
        count += 1
        doc = json.loads(path.read_bytes())
        doc["owner"] = f"tool {count}"
        tmp = path.with_name(path.name + ".swp")
        tmp.write_bytes(json.dumps(doc).encode())
        os.replace(tmp, path)

    return save


def after_a_first_note(ws: Workspace) -> Path:
    """memd.json once a first note is in it; skips where the filesystem cannot exchange files (renameat2's
    RENAME_EXCHANGE): only a file memd exchanged is checked for writers that still hold the old one open."""
    if not fsio.RENAMES.supported:
        pytest.skip("needs renameat2(RENAME_EXCHANGE): only an exchanged file is checked for writers")
    write(ws, note("first"))
    return own_file(ws.root)


# --- planning again, and giving up ---------------------------------------------------------------------------


def test_a_batch_planned_again_twice_counts_two_replans_and_keeps_the_lock_throughout(
    ws: Workspace, io: PersonEveryAttempt, caplog: pytest.LogCaptureFixture
) -> None:
    write(ws, note("first"))
    own = own_file(ws.root)
    saves = rewrite_each_time(own)
    held_during: list[bool] = []

    def person() -> None:
        held_during.append(ws.exclusive.locked())
        if io.attempts <= 2:  # the first two attempts find the file changed; the third publishes
            saves()

    io.before_each = person
    caplog.set_level(logging.INFO)

    results = write(ws, note("second"))

    assert not isinstance(results[0], BaseException)
    assert ws.health.replans == 2
    assert held_during == [True, True, True]  # no other batch, sweep or restore got in between the attempts
    assert [n["text"] for n in read_hot(ws.root)["notes"]] == ["first", "second"]
    assert json.loads(own.read_bytes())["owner"] == "tool 2"
    assert (
        messages(caplog, logging.INFO)
        == [f"workspace alpha: {own} was saved outside memd while publishing; planning again on it"] * 2
    )
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []  # nothing released twice, nothing failed
    assert not ws.exclusive.locked()


def test_a_file_rewritten_under_every_attempt_fails_its_batch_after_seventeen_and_the_writer_goes_on(
    ws: Workspace, io: PersonEveryAttempt, caplog: pytest.LogCaptureFixture
) -> None:
    write(ws, note("first"))
    own = own_file(ws.root)
    io.before_each = rewrite_each_time(own)
    caplog.set_level(logging.INFO)

    (failure,) = write(ws, note("lost to the loop"))

    expected = (
        f"{own} changed outside memd (or was held open for writing) during each of 17 attempts to publish a batch "
        "of workspace 'alpha'; nothing was written or acknowledged: stop the tool rewriting or holding it, then retry"
    )
    assert isinstance(failure, StorageError)
    assert (failure.message, failure.data) == (expected, {"path": str(own)})
    assert io.attempts == writer.MAX_REPLANS + 1 == 17
    assert ws.health.replans == 17
    assert messages(caplog, logging.ERROR) == [expected]
    assert len(messages(caplog, logging.INFO)) == 16  # one per attempt planned again
    assert [n["text"] for n in read_hot(ws.root)["notes"]] == ["first"]

    io.before_each = None  # the tool stops: the writer was not left holding its lock
    assert not isinstance(write(ws, note("after"))[0], BaseException)
    assert [n["text"] for n in read_hot(ws.root)["notes"]] == ["first", "after"]


def test_a_file_held_open_for_writing_is_tried_again_after_doubling_waits_capped_at_100_ms(
    ws: Workspace, caplog: pytest.LogCaptureFixture
) -> None:
    own = after_a_first_note(ws)
    caplog.set_level(logging.INFO)

    with own.open("r+b"):  # a tool holds memd.json open for writing the whole time (its write may be on the way)
        (failure,) = write(ws, note("waits"))

    assert isinstance(failure, StorageError)
    assert failure.data == {"path": str(own)}
    waits = [1, 2, 4, 8, 16, 32, 64] + [100] * 9
    assert messages(caplog, logging.INFO) == [
        f"workspace alpha: {own} is held open for writing; planning again in {ms} ms" for ms in waits
    ]
    assert not isinstance(write(ws, note("after"))[0], BaseException)  # closed now: published at once
    assert [n["text"] for n in read_hot(ws.root)["notes"]] == ["first", "after"]


def test_a_tool_that_held_the_file_open_and_then_wrote_its_change_is_read_once_before_the_next_attempt(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = after_a_first_note(ws)
    tool = own.open("r+b")  # a tool opened memd.json for writing before memd's attempt
    theirs = {**json.loads(own.read_bytes()), "owner": "the tool"}
    real_check = fsio_batch._held_open_for_writing

    def tool_finishes_right_after_the_check(path: Path) -> bool:
        busy = real_check(path)
        if busy and not tool.closed:  # memd saw the writer and waits; the tool's write lands now, in the old file
            tool.seek(0)
            tool.write(json.dumps(theirs).encode())
            tool.truncate()
            tool.close()
        return busy

    monkeypatch.setattr(fsio_batch, "_held_open_for_writing", tool_finishes_right_after_the_check)

    results = write(ws, note("second"))

    assert not isinstance(results[0], BaseException)
    assert ws.health.replans == 1  # the wait ended in a re-read of that file: the next attempt was planned on it
    on_disk = json.loads(own.read_bytes())
    assert on_disk["owner"] == "the tool"
    assert [n["text"] for n in on_disk["notes"]] == ["first", "second"]


def test_a_file_that_cannot_be_read_again_fails_the_batch_with_the_reason_and_the_writer_goes_on(
    ws: Workspace, io: PersonEveryAttempt, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(ws, note("first"))
    own = own_file(ws.root)
    io.before_each = rewrite_each_time(own)

    def unreadable(path: Path) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(ws.planner, "reread", unreadable)

    (failure,) = write(ws, note("second"))

    assert isinstance(failure, StorageError)
    assert failure.message == f"could not re-read {own}: [Errno 13] Permission denied: '{own}'"
    assert messages(caplog, logging.ERROR) == [f"workspace alpha: re-reading {own} for a re-plan failed"]
    io.before_each = None
    monkeypatch.undo()
    assert not isinstance(write(ws, note("after"))[0], BaseException)


# --- a failed disk write ---------------------------------------------------------------------------------------


def failing_fsync(monkeypatch: pytest.MonkeyPatch, exc: OSError) -> None:
    real_fsync = fsio.os.fsync
    calls = 0

    def fsync(fd: int) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise exc
        real_fsync(fd)

    monkeypatch.setattr(fsio.os, "fsync", fsync)


def test_a_failed_write_names_the_reason_and_the_file_and_marks_the_workspace_faulty(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    target = ws.root / "hot" / "context.json"
    failing_fsync(monkeypatch, OSError(errno.EIO, "Input/output error", str(target)))
    caplog.set_level(logging.INFO)

    (failure,) = write(ws, note("lost"))

    expected = f"could not write workspace 'alpha' durably: Input/output error ({target}); nothing was acknowledged"
    assert isinstance(failure, StorageError)
    assert (failure.message, failure.data) == (expected, {"errno": errno.EIO})
    assert ws.health.write_fault is True
    assert ws.health.last_write_error == expected
    assert ws.health.last_write_error_at == START.isoformat(timespec="seconds")
    assert messages(caplog, logging.ERROR) == [expected]

    caplog.clear()
    assert not isinstance(write(ws, note("kept"))[0], BaseException)
    assert ws.health.write_fault is False  # cleared by the next batch that succeeds
    assert messages(caplog, logging.INFO) == ["workspace alpha: writes succeed again"]


def test_a_failure_without_an_errno_is_told_by_its_text_and_the_workspace_directory(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing_fsync(monkeypatch, OSError("the device went away"))

    (failure,) = write(ws, note("lost"))

    assert isinstance(failure, StorageError)
    assert failure.message == (
        f"could not write workspace 'alpha' durably: the device went away ({ws.root}); nothing was acknowledged"
    )
    assert failure.data == {"errno": None}


# --- what happens around an acknowledged batch -------------------------------------------------------------------


def test_a_change_sink_that_fails_is_logged_and_the_write_is_still_acknowledged(
    open_alpha: Callable[..., Workspace], io: PersonEveryAttempt, caplog: pytest.LogCaptureFixture
) -> None:
    sink = FailingSink()
    ws = open_alpha(io, sink=sink)

    results = write(ws, note("kept"))

    assert not isinstance(results[0], BaseException)
    assert sink.calls == 1
    records = [r for r in caplog.records if r.name == writer.__name__ and r.levelno == logging.ERROR]
    assert [r.getMessage() for r in records] == ["workspace alpha: the change sink failed"]
    assert records[0].exc_info is not None and "listener bug" in str(records[0].exc_info[1])


def test_metrics_hear_each_durable_batch_with_its_number_of_requests_and_its_seconds(
    open_alpha: Callable[..., Workspace], io: PersonEveryAttempt
) -> None:
    heard: list[tuple[int, float]] = []
    ws = open_alpha(io, on_batch=lambda n, s: heard.append((n, s)))

    write(ws, note("a"), note("b"), note("c"))  # sent together: one batch, one fsync each file

    assert [n for n, _ in heard] == [3]
    assert isinstance(heard[0][1], float) and 0 < heard[0][1] < HANG


def test_a_reconfigured_queue_limit_applies_to_the_next_write(ws: Workspace) -> None:
    ws.writer.reconfigure(1)

    first, second = write(ws, note("queued"), note("one too many"))

    assert not isinstance(first, BaseException)
    assert isinstance(second, Busy)
    assert "workspace 'alpha' has 1 writes queued" in second.message


def test_a_metrics_hook_that_fails_is_logged_and_the_write_is_still_acknowledged(
    open_alpha: Callable[..., Workspace], io: PersonEveryAttempt, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(requests: int, seconds: float) -> None:
        raise ValueError("metrics bug")

    ws = open_alpha(io, on_batch=broken)

    results = write(ws, note("kept"))

    assert not isinstance(results[0], BaseException)
    assert [n["text"] for n in read_hot(ws.root)["notes"]] == ["kept"]
    records = [r for r in caplog.records if r.name == writer.__name__ and r.levelno == logging.ERROR]
    assert [r.getMessage() for r in records] == ["workspace alpha: recording the batch's metrics failed"]
    assert records[0].exc_info is not None and "metrics bug" in str(records[0].exc_info[1])


def test_a_batch_that_finishes_after_the_loop_closed_is_reported_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.new_event_loop()
    loop.close()

    writer.call_in_loop(loop, lambda: None)  # a worker thread finishing while memd stops: nothing to wake

    assert messages(caplog, logging.WARNING) == [
        "a batch finished after the event loop closed; its requests were never acknowledged"
    ]


# --- failures that are no one's write: a swapped directory, a bug, shutdown ------------------------------------


def test_a_workspace_directory_swapped_under_memd_fails_the_write_and_shows_in_health(ws: Workspace) -> None:
    write(ws, note("first"))
    ws.root.rename(ws.root.with_name("moved-away"))
    ws.root.mkdir()  # another directory under the workspace's name

    (failure,) = write(ws, note("never written into the impostor"))

    assert isinstance(failure, StorageError)
    assert ws.health.write_fault is True
    assert ws.health.last_write_error == failure.message != ""
    assert list(ws.root.iterdir()) == []


def asyncio_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "asyncio" and r.levelno >= logging.ERROR]


@pytest.mark.parametrize("stage", ["plan", "publish"])
def test_a_bug_in_planning_or_publishing_fails_the_batch_with_it_and_the_writer_goes_on(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, stage: str
) -> None:
    def bug(*args: Any) -> Any:
        raise RuntimeError(f"{stage} bug")

    monkeypatch.setattr(ws.planner, stage, bug)

    (failure,) = write(ws, note("fails loudly"))

    assert isinstance(failure, RuntimeError) and str(failure) == f"{stage} bug"
    records = [r for r in caplog.records if r.name == writer.__name__ and r.levelno == logging.ERROR]
    assert [r.getMessage() for r in records] == ["workspace alpha: batch failed unexpectedly"]
    assert records[0].exc_info is not None and records[0].exc_info[1] is failure
    monkeypatch.undo()
    assert not isinstance(write(ws, note("after"))[0], BaseException)
    assert asyncio_errors(caplog) == []


@pytest.mark.parametrize("stage", ["plan", "publish"])
def test_a_cancellation_inside_the_writer_fails_the_batch_as_shutting_down_and_the_writer_goes_on(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, stage: str
) -> None:
    def cancelled(*args: Any) -> Any:
        raise asyncio.CancelledError("memd is stopping")

    monkeypatch.setattr(ws.planner, stage, cancelled)

    (failure,) = write(ws, note("not written"))

    assert isinstance(failure, ShuttingDown)
    expected = "memd is stopping" if stage == "plan" else "memd is shutting down; nothing was written"
    assert failure.message == expected
    monkeypatch.undo()
    assert not isinstance(write(ws, note("after"))[0], BaseException)
    assert asyncio_errors(caplog) == []  # handled where it happened: nothing raised out of a loop callback


def test_a_write_after_the_io_threads_stopped_is_refused_as_shutting_down_and_nothing_is_in_flight(
    ws: Workspace, io: PersonEveryAttempt
) -> None:
    io.shutdown()

    (failure,) = write(ws, note("too late"))

    assert isinstance(failure, ShuttingDown)
    assert failure.message == (
        "memd is shutting down (cannot schedule new futures after shutdown); nothing was written"
    )
    assert ws.writer.in_flight is None


def test_a_write_after_close_is_refused_with_what_to_do(ws: Workspace) -> None:
    asyncio.run(ws.close())

    (failure,) = write(ws, note("too late"))

    assert isinstance(failure, ShuttingDown)
    assert failure.message == "memd is shutting down; retry against the restarted daemon"


# --- the planner the writer hands each batch to -------------------------------------------------------------------


def test_a_reloaded_time_zone_decides_the_day_file_its_heading_and_the_entry_time(ws: Workspace) -> None:
    from dataclasses import replace

    from memd.config import WarmConfig

    ws.reconfigure(replace(ws.config, warm=WarmConfig(timezone="Asia/Tokyo")))

    write(ws, lambda d: d.log("after the reload"))

    day = ws.root / "warm" / "2024-03-15.md"  # 09:30 UTC is 18:30 in Tokyo, the same day
    text = day.read_text(encoding="utf-8")
    assert text.startswith("# Activity Log 2024-03-15 (UTC+09:00, Asia/Tokyo)\n")
    assert "### 18:30:00 - after the reload" in text


def test_an_edit_that_raises_fails_alone_and_is_logged_with_the_workspace_name(
    ws: Workspace, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(draft: Any) -> None:
        raise ValueError("an edit's bug")

    kept, failed = write(ws, note("kept"), broken)

    assert not isinstance(kept, BaseException) and isinstance(failed, ValueError)
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR] == ["workspace alpha: an edit failed"]


def test_a_swapped_workspace_directory_is_an_error_naming_it_logged_once_and_cleared_when_it_is_back(
    ws: Workspace, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    away = ws.root.with_name("moved-away")
    ws.root.rename(away)
    ws.root.mkdir()

    failures = []
    for _ in range(2):
        with pytest.raises(StorageError) as refused:
            ws.check_identity()
        failures.append(refused.value)

    message = failures[0].message
    assert message.startswith("workspace 'alpha': ") and failures[1].message == message
    assert failures[0].data == {"errno": failures[0].data["errno"], "path": str(ws.root)}
    assert isinstance(failures[0].data["errno"], int)
    assert ws.health.identity_error == message
    identity_logs = [r.getMessage() for r in caplog.records if r.name == "memd.workspace"]
    assert identity_logs == [message]  # once, not once per refused request

    ws.root.rmdir()
    away.rename(ws.root)
    ws.check_identity()

    assert ws.health.identity_error == ""
    assert [r.getMessage() for r in caplog.records if r.name == "memd.workspace"][1:] == [
        "workspace alpha: its directory is the one memd opened again"
    ]
