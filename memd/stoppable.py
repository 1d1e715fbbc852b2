"""Background child processes that a stopping daemon ends instead of waiting for: a `git gc` of a repository that
snapshots filled may run for minutes, and a stop that waits for it outlasts systemd's stop timeout (the daemon is
then killed, its last snapshot never made). Blocking: `run` is called from a worker thread.

Each process runs in a session of its own, so that `stop` reaches its children too (`git gc` runs `git repack`,
which runs `git pack-objects`): SIGTERM to the whole group. git removes its lock and temporary files on SIGTERM;
an interrupted gc leaves the repository as it was, and the next gc starts over. Imports nothing of memd.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path


class ProcessStopped(Exception):
    """The process was ended by `Stoppable.stop`, or not started because the daemon is stopping."""


class Stoppable:
    """The background processes running now, and whether the daemon is stopping."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[bytes]] = set()
        self._stopping = False

    @property
    def stopping(self) -> bool:
        return self._stopping

    def run(
        self, cmd: Sequence[str], *, cwd: Path, env: Mapping[str, str], timeout: float
    ) -> subprocess.CompletedProcess[bytes]:
        """`subprocess.run(cmd, capture_output=True, timeout=timeout)`, except that `stop` ends it (ProcessStopped).
        A timeout kills the whole group, then raises subprocess.TimeoutExpired as `subprocess.run` does."""
        with self._lock:
            if self._stopping:
                raise ProcessStopped(f"{cmd[0]} not started: memd is stopping")
            proc = subprocess.Popen(
                cmd,
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
            self._running.add(proc)
        try:
            try:
                out, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                with self._lock:
                    _signal_group(proc, signal.SIGKILL)
                proc.communicate()
                raise
        finally:
            with self._lock:
                self._running.discard(proc)
        if self._stopping and proc.returncode != 0:
            raise ProcessStopped(f"{cmd[0]} ended: memd is stopping")
        return subprocess.CompletedProcess(list(cmd), proc.returncode, out, err)

    def stop(self) -> int:
        """End every process running now (SIGTERM to its group) and refuse new ones. Returns how many were ended."""
        with self._lock:
            self._stopping = True
            running = list(self._running)
            for proc in running:
                _signal_group(proc, signal.SIGTERM)
        return len(running)


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """Signal `proc`'s process group, unless `proc` is known to have exited (its id, and so its group's, may be
    given to another process once it is reaped)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
