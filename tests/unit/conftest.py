"""Fixtures for unit tests that build stores and workspaces directly (no daemon)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from clocks import START, FixedClock

from memd.config import SnapshotConfig, WorkspaceConfig
from memd.snapshots import Snapshotter
from memd.tokens import TokenCounter
from memd.workspace import Workspace


@pytest.fixture(scope="session")
def counter() -> TokenCounter:
    """One tokenizer for the whole run: loading it costs ~120 ms."""
    return TokenCounter.for_encoding("cl100k_base")


@pytest.fixture
def io() -> Iterator[ThreadPoolExecutor]:
    """The worker threads a Workspace makes its writes durable on."""
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="test-io") as executor:
        yield executor


@pytest.fixture
def open_alpha(tmp_path: Path, counter: TokenCounter) -> Callable[..., Workspace]:
    """Workspace "alpha" under tmp_path, opened, on the given I/O executor (a test's own, to act inside its work),
    at the fixed clock of the tests; keyword arguments go to Workspace (a sink, metrics, limits)."""

    def make(io: Executor, **kwargs: Any) -> Workspace:
        workspace = Workspace(WorkspaceConfig("alpha", tmp_path / "alpha"), counter, FixedClock(START), io, **kwargs)
        workspace.open()
        return workspace

    return make


@pytest.fixture
def ws(open_alpha: Callable[..., Workspace], io: ThreadPoolExecutor) -> Workspace:
    """Workspace "alpha", opened, on the test's I/O threads (a module may define its own `ws`)."""
    return open_alpha(io)


@pytest.fixture
def snapshots(tmp_path: Path, io: ThreadPoolExecutor) -> Snapshotter:
    """A snapshotter whose debounce never fires by itself: a test commits when it asks."""
    return Snapshotter(SnapshotConfig(settle_seconds=60), tmp_path / "state", io)
