"""Specification of the registry's resilience (contract 8): one broken workspace or directory never stops the
reconcile job, discovery or adoption for the others."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from clocks import START, FixedClock

from memd.config import WorkspaceConfig, parse_config
from memd.registry import Registry
from memd.tokens import TokenCounter
from memd.workspace import Workspace


@pytest.fixture
def io() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=2) as executor:
        yield executor


def registry_of(tmp_path: Path, counter: TokenCounter, io: ThreadPoolExecutor, **sections: Any) -> Registry:
    raw = {
        "daemon": {"state_dir": str(tmp_path / "state")},
        "workspaces": {name: {"path": str(tmp_path / name)} for name in ("broken", "fine")},
        **sections,
    }
    config = parse_config(raw, {"HOME": str(tmp_path)})

    def factory(wc: WorkspaceConfig) -> Workspace:
        ws = Workspace(wc, counter, FixedClock(START), io)
        ws.open()
        return ws

    registry = Registry(config, factory)
    for wc in config.workspaces.values():
        registry.add(wc)
    return registry


def test_a_workspace_whose_warm_dir_became_a_file_does_not_stop_reconcile_for_the_others(
    tmp_path: Path, counter: TokenCounter, io: ThreadPoolExecutor
) -> None:
    registry = registry_of(tmp_path, counter, io)
    shutil.rmtree(tmp_path / "broken" / "warm")
    (tmp_path / "broken" / "warm").write_text("not a directory\n", encoding="utf-8")
    (tmp_path / "fine" / "cold" / "MEMORY.md").write_text(
        "# Agent Memory\n\n## Notes\n- [2024-03-15] written by a person\n", encoding="utf-8"
    )

    changed = asyncio.run(registry.reconcile())

    assert changed == 1
    assert [lr.text for lr in registry.workspaces["fine"].cold.learnings] == ["written by a person"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_an_unreadable_directory_under_a_discovery_root_is_skipped(
    tmp_path: Path, counter: TokenCounter, io: ThreadPoolExecutor
) -> None:
    root = tmp_path / "root"
    (root / "found" / "hot").mkdir(parents=True)
    (root / "private" / "hot").mkdir(parents=True)
    os.chmod(root / "private", 0o700)
    registry = registry_of(tmp_path, counter, io, discovery={"roots": [str(root)]})
    pid = os.fork()
    if pid == 0:  # as an unprivileged user, like a daemon run by a person beside another person's 0700 directory
        code = 1
        try:
            os.setgid(65534)
            os.setuid(65534)
            registry.discover()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
