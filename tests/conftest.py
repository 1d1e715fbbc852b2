"""Fixtures shared by every test: a temporary home for each test, and real daemons on temporary configs."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import RunningDaemon, base_config

# warm.timezone defaults to the machine's zone ($TZ, /etc/localtime): the suite, and every daemon it starts, runs in
# UTC whatever machine it is on, and a test of another zone sets it in the config or in the environment it passes.
os.environ["TZ"] = "UTC"
time.tzset()


@pytest.fixture(autouse=True)
def temporary_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No test reads or writes the real home, XDG directories or a real memd socket."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR"):
        monkeypatch.delenv(var, raising=False)
    for var in ("MEMD_SOCKET", "MEMD_CONFIG", "NOTIFY_SOCKET", "WATCHDOG_USEC", "LISTEN_FDS", "LISTEN_PID"):
        monkeypatch.delenv(var, raising=False)
    return home


@pytest.fixture
def short_root() -> Iterator[Path]:
    """A short directory: Unix socket paths must fit in 107 bytes, and pytest's tmp_path can be long."""
    with tempfile.TemporaryDirectory(prefix="memd-") as d:
        yield Path(d)


@pytest.fixture
def make_daemon(short_root: Path) -> Iterator[Callable[..., RunningDaemon]]:
    started: list[RunningDaemon] = []

    def make(name: str = "d", config: dict[str, Any] | None = None, start: bool = True, **kwargs: Any) -> RunningDaemon:
        root = short_root / name
        daemon = RunningDaemon(root, config or base_config(root), **kwargs)
        started.append(daemon)
        return daemon.start() if start else daemon

    yield make
    for daemon in started:
        daemon.kill()


@pytest.fixture
def daemon(make_daemon: Callable[..., RunningDaemon]) -> RunningDaemon:
    return make_daemon()
