"""The watcher on real inotify: one instance and one reader thread for every workspace, recursion kept true as
directories come and go, an overflow reported as "everything may have changed", nothing leaked by stop().

The kernel delivers one instance's events in order to the one reader thread, so `barrier()` (touch a file in
another tier and wait for its hint) proves every earlier event was handled. Every wait is a bounded poll; no test
asserts how long anything took.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memd.watcher import TIERS, Watcher

Hint = tuple[Path, str, bool]
DEADLINE = 10.0


class Recorder:
    """The daemon's side of the watcher: records every hint; `gate` can hold the reader thread."""

    def __init__(self) -> None:
        self.hints: list[Hint] = []
        self.gate = threading.Event()
        self.gate.set()
        self._lock = threading.Lock()
        self._barriers = 0

    def __call__(self, root: Path, tier: str, structural: bool) -> None:
        self.gate.wait(DEADLINE)
        with self._lock:
            self.hints.append((root, tier, structural))

    def seen(self) -> set[Hint]:
        with self._lock:
            return set(self.hints)

    def clear(self) -> None:
        with self._lock:
            self.hints.clear()

    def wait_for(self, probe: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + DEADLINE
        while not probe():
            if time.monotonic() > deadline:
                pytest.fail(f"timed out waiting for {what}; hints: {sorted(self.seen())[:20]}")
            time.sleep(0.005)

    def wait_hint(self, hint: Hint) -> None:
        self.wait_for(lambda: hint in self.seen(), f"hint {hint}")

    def barrier(self, ws: Path) -> None:
        """Every event queued before this call has been handled once it returns."""
        self._barriers += 1
        (ws / "hot" / f"barrier-{self._barriers}").write_text("x")
        self.wait_hint((ws, "hot", False))


def make_workspace(root: Path, name: str) -> Path:
    ws = root / name
    for tier in TIERS:
        (ws / tier).mkdir(parents=True)
    (ws / "warm" / "archive").mkdir()
    (ws / "cold" / "MEMORY.md").write_text("# Agent Memory\n")
    return ws


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def watcher(recorder: Recorder) -> Iterator[Watcher]:
    w = Watcher(recorder)
    w.start()
    yield w
    recorder.gate.set()
    w.stop()


def test_one_reader_thread_serves_every_workspace(tmp_path: Path, recorder: Recorder) -> None:
    threads_before = threading.active_count()
    w = Watcher(recorder)
    w.start()
    try:
        spaces = [make_workspace(tmp_path, f"w{i:02d}") for i in range(50)]
        for ws in spaces:
            w.watch_workspace(ws)

        assert threading.active_count() - threads_before == 1
        assert w.status()["watched"] == 50 and w.alive
        (spaces[-1] / "cold" / "MEMORY.md").write_text("# Agent Memory\n\n## Edited\n")
        recorder.wait_hint((spaces[-1], "cold", False))
        (spaces[0] / "warm" / "archive" / "2020-01.md.gz").write_bytes(b"x")
        recorder.wait_hint((spaces[0], "warm", False))
    finally:
        w.stop()
    assert threading.active_count() == threads_before


def test_a_directory_made_under_a_tier_after_watching_is_watched(
    tmp_path: Path, watcher: Watcher, recorder: Recorder
) -> None:
    ws = make_workspace(tmp_path, "alpha")
    watcher.watch_workspace(ws)

    (ws / "warm" / "archive" / "x" / "y").mkdir(parents=True)
    recorder.barrier(ws)
    recorder.clear()
    (ws / "warm" / "archive" / "x" / "y" / "f.md").write_text("deep")

    recorder.wait_hint((ws, "warm", False))


def test_a_directory_renamed_inside_a_tier_stays_watched_under_its_new_name(
    tmp_path: Path, watcher: Watcher, recorder: Recorder
) -> None:
    ws = make_workspace(tmp_path, "alpha")
    (ws / "warm" / "archive" / "sub").mkdir()
    watcher.watch_workspace(ws)

    (ws / "warm" / "archive").rename(ws / "warm" / "old")
    recorder.barrier(ws)
    recorder.clear()
    (ws / "warm" / "old" / "sub" / "f.md").write_text("moved")

    recorder.wait_hint((ws, "warm", False))


def test_a_tier_directory_removed_is_structural_and_git_and_temp_files_are_not_reported(
    tmp_path: Path, watcher: Watcher, recorder: Recorder
) -> None:
    ws = make_workspace(tmp_path, "alpha")
    (ws / "cold" / ".git").mkdir()
    watcher.watch_workspace(ws)

    (ws / "cold" / ".git" / "index").write_text("git's")
    (ws / "cold" / "MEMORY.md.memd-tmp-123").write_text("memd's")
    (ws / "notes.txt").write_text("not a tier")
    recorder.barrier(ws)
    assert recorder.seen() == {(ws, "hot", False)}

    shutil.rmtree(ws / "warm")
    recorder.wait_hint((ws, "warm", True))


def test_a_directory_made_under_a_discovery_root_is_reported(
    tmp_path: Path, watcher: Watcher, recorder: Recorder
) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    watcher.watch_discovery_root(agents)

    (agents / "newbot" / "hot").mkdir(parents=True)

    recorder.wait_hint((agents / "newbot", "", False))


def test_an_overflow_reports_every_tier_of_every_workspace_once(
    tmp_path: Path, watcher: Watcher, recorder: Recorder
) -> None:
    spaces = [make_workspace(tmp_path, f"w{i}") for i in range(5)]
    for ws in spaces:
        watcher.watch_workspace(ws)
    agents = tmp_path / "agents"
    (agents / "bot").mkdir(parents=True)
    watcher.watch_discovery_root(agents)
    max_queued = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())

    recorder.gate.clear()  # the reader thread stops at its next hint, so the kernel queue fills up
    scratch = spaces[0] / "warm" / "scratch.txt"
    for _ in range(max_queued + 1000):  # each append queues a modify and a close_write
        with open(scratch, "a") as f:
            f.write("x\n")
    recorder.gate.set()

    everything = {(ws, tier, False) for ws in spaces for tier in TIERS} | {(agents / "bot", "", False)}
    recorder.wait_for(lambda: everything <= recorder.seen(), "a hint for every workspace and tier")
    status = watcher.status()
    assert status["overflows"] == 1
    assert (status["alive"], status["handler_errors"], status["degraded"]) == (True, 0, None)


def test_an_unwatched_workspace_reports_nothing(tmp_path: Path, watcher: Watcher, recorder: Recorder) -> None:
    gone, kept = make_workspace(tmp_path, "gone"), make_workspace(tmp_path, "kept")
    watcher.watch_workspace(gone)
    watcher.watch_workspace(kept)

    watcher.unwatch(gone)
    for tier in TIERS:
        (gone / tier / "edit.md").write_text("unseen")
    recorder.barrier(kept)

    assert {hint[0] for hint in recorder.seen()} == {kept}
    assert watcher.status()["watched"] == 1


def test_a_reader_whose_inotify_instance_was_closed_under_it_ends_instead_of_spinning(
    tmp_path: Path, recorder: Recorder
) -> None:
    w = Watcher(recorder)
    w.start()
    try:
        w.watch_workspace(make_workspace(tmp_path, "alpha"))
        fd = w._fd
        assert fd is not None and fd.is_alive()
        fd.close()  # closed without being stopped: every read now returns nothing at once
        fd.join(timeout=5)
        assert not fd.is_alive() and not w.alive
    finally:
        w.stop()


def test_a_handler_exception_is_counted_and_the_reader_keeps_going(tmp_path: Path) -> None:
    calls: list[Hint] = []

    def fails_once(root: Path, tier: str, structural: bool) -> None:
        calls.append((root, tier, structural))
        if len(calls) == 1:
            raise RuntimeError("boom")

    w = Watcher(fails_once)
    w.start()
    try:
        ws = make_workspace(tmp_path, "alpha")
        w.watch_workspace(ws)
        (ws / "hot" / "a").write_text("1")
        Recorder().wait_for(lambda: len(calls) >= 1, "the failing hint")
        (ws / "cold" / "b").write_text("2")
        Recorder().wait_for(lambda: (ws, "cold", False) in calls, "a hint after the failure")
        status = w.status()
        assert (status["alive"], status["handler_errors"], status["last_error"]) == (True, 1, "RuntimeError: boom")
    finally:
        w.stop()


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_stop_closes_the_inotify_instance_and_ends_the_thread(tmp_path: Path, recorder: Recorder) -> None:
    ws = make_workspace(tmp_path, "alpha")
    fds_before, threads_before = open_fds(), threading.active_count()

    for _ in range(3):
        w = Watcher(recorder)
        w.start()
        w.watch_workspace(ws)
        assert w.alive
        w.stop()
        assert not w.alive

    assert (open_fds(), threading.active_count()) == (fds_before, threads_before)
