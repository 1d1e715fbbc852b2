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


def test_a_reload_that_moves_a_workspace_waits_for_its_old_writer_before_the_new_one_serves(
    tmp_path: Path, counter: TokenCounter, io: ThreadPoolExecutor
) -> None:
    """A restore or sweep holds the old workspace's writer while it rewrites files; a reload that serves the same
    directory under a new name (or another encoding) opens a second workspace with a writer of its own. Until the
    old one is let go, the new one must not write: its acknowledged writes would be rewritten by the restore."""
    registry = registry_of(tmp_path, counter, io)
    raw = {
        "daemon": {"state_dir": str(tmp_path / "state")},
        "workspaces": {"broken": {"path": str(tmp_path / "broken")}, "renamed": {"path": str(tmp_path / "fine")}},
    }
    new = parse_config(raw, {"HOME": str(tmp_path)})

    async def go() -> None:
        old = registry.workspaces["fine"]
        await old.exclusive.acquire()  # a restore is rewriting the files
        opened = registry.prepare(new)
        applying = asyncio.ensure_future(registry.apply(new, opened))
        for _ in range(50):
            await asyncio.sleep(0)
        assert not applying.done() and "renamed" not in registry.workspaces
        old.exclusive.release()
        await asyncio.wait_for(applying, 10)
        assert registry.workspaces["renamed"] is opened["renamed"] and "fine" not in registry.workspaces

    asyncio.run(go())
