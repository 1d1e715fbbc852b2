"""The hot tier's layout change: memd's own keys moved out of hot/context.json into hot/memd.json, after a commit of
the state before it, so that the commit undoes it (`memd restore NAME <commit> hot`).

A workspace from before format 2, a restored old hot/, or a person's edit of one of memd's keys leaves them in
context.json (`HotStore.needs_split`). The split runs under the repository lock, as any snapshot: it commits the
state as it is, has the writer split, and commits again. When the first commit fails nothing moves (writes keep
the keys where they are) and the next flush tries again. `HotSplit.schedule` is called when a workspace is
tracked, when a change or restore leaves memd's keys in context.json, and from every flush until the split
succeeds; the task it starts is one of the snapshotter's, so a flush waits for it.
Kept apart from memd.snapshots because it is a migration of one tier's files, which drives the snapshotter
through its public methods (`repo_state`, `commit_locked`, `commits`, `spawn`) like memd.snapshot_history.
Imports memd.errors (memd.snapshots' `Snapshotter` and memd.workspace's `Workspace` only for annotations:
memd.snapshots makes one HotSplit per snapshotter and calls it).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from memd.errors import MemdError

if TYPE_CHECKING:
    from memd.snapshots import Snapshotter
    from memd.workspace import Workspace

log = logging.getLogger(__name__)


class HotSplit:
    """The hot split of one snapshotter's workspaces."""

    def __init__(self, snapshots: Snapshotter) -> None:
        self._snapshots = snapshots
        self.pending: set[str] = set()  # workspaces whose split is scheduled or running

    def schedule(self, ws: Workspace) -> None:
        """Schedule the split (`split`) when hot/context.json holds memd's own keys (and none is scheduled yet)."""
        if not ws.hot.needs_split or ws.name in self.pending:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # not serving yet: the next change or flush schedules it
            return
        self.pending.add(ws.name)
        self._snapshots.spawn(self.split(ws))

    async def split(self, ws: Workspace) -> bool:
        """Move memd's own hot state out of hot/context.json into hot/memd.json, after committing the state as it
        is (see the module docstring). Returns whether anything moved."""
        snapshots = self._snapshots
        try:
            state = snapshots.repo_state(ws)
            async with state.lock:
                if not ws.hot.needs_split:
                    return False
                commits = snapshots.commits("hot")
                before = ""
                if commits:
                    before, _ = await snapshots.commit_locked(ws, state, "before hot split", None, whole=True)
                    if not before:
                        log.warning(
                            "workspace %s: hot/context.json keeps memd's keys until its state can be committed "
                            "first (%s)", ws.name, state.last_error or "unknown snapshot error",
                        )  # fmt: skip
                        return False
                try:
                    moved = await ws.split_hot()
                except MemdError as exc:  # a corrupt file, the workspace closing: tried again later
                    log.warning("workspace %s: hot split postponed: %s", ws.name, exc.message)
                    return False
                if moved and commits:
                    await snapshots.commit_locked(ws, state, "hot split", {"Memd-Hot-Split-From": before}, whole=True)
                return moved
        finally:
            self.pending.discard(ws.name)
