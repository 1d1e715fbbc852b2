"""memd.stoppable: background processes that a stopping daemon ends, children included, instead of waiting for."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from memd.stoppable import ProcessStopped, Stoppable

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def wait_for_file(path: Path) -> None:
    deadline = time.monotonic() + 20
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(") ", 1)[1][0] != "Z"


def test_a_process_that_finishes_is_answered_like_subprocess_run(tmp_path: Path) -> None:
    done = Stoppable().run(["sh", "-c", "echo out; echo err >&2; exit 3"], cwd=tmp_path, env=ENV, timeout=20)
    assert (done.returncode, done.stdout, done.stderr) == (3, b"out\n", b"err\n")


def test_stop_ends_a_running_process_and_its_children(tmp_path: Path) -> None:
    """`git gc` runs `git repack`, which runs `git pack-objects`: ending only the first would leave the work going."""
    stoppable = Stoppable()
    child_pid = tmp_path / "child"
    script = f"sleep 60 & echo $! > {child_pid}.tmp; mv {child_pid}.tmp {child_pid}; wait"
    outcome: list[BaseException | subprocess.CompletedProcess[bytes]] = []

    def background() -> None:
        try:
            outcome.append(stoppable.run(["sh", "-c", script], cwd=tmp_path, env=ENV, timeout=60))
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=background)
    worker.start()
    wait_for_file(child_pid)
    grandchild = int(child_pid.read_text())

    assert stoppable.stop() == 1
    worker.join(20)
    assert not worker.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], ProcessStopped)
    deadline = time.monotonic() + 20
    while alive(grandchild):  # reaped by init once its group was signalled
        assert time.monotonic() < deadline, "the child of the stopped process is still running"
        time.sleep(0.01)


def test_nothing_starts_once_stopping(tmp_path: Path) -> None:
    stoppable = Stoppable()
    assert stoppable.stop() == 0
    assert stoppable.stopping
    marker = tmp_path / "ran"
    with pytest.raises(ProcessStopped, match="not started"):
        stoppable.run(["touch", str(marker)], cwd=tmp_path, env=ENV, timeout=20)
    assert not marker.exists()


def test_a_timeout_kills_the_whole_group_and_raises_as_subprocess_run_does(tmp_path: Path) -> None:
    child_pid = tmp_path / "child"
    script = f"sleep 60 & echo $! > {child_pid}; wait"
    with pytest.raises(subprocess.TimeoutExpired):
        Stoppable().run(["sh", "-c", script], cwd=tmp_path, env=ENV, timeout=1.0)
    grandchild = int(child_pid.read_text())
    deadline = time.monotonic() + 20
    while alive(grandchild):
        assert time.monotonic() < deadline, "the child of the timed-out process is still running"
        time.sleep(0.01)
