"""Where a workspace tells the rest of the daemon what happened to its files: one change sink, given to each
workspace when it is made (never wired onto it afterwards).

- `registered(ws)`: the workspace is served from now on (the snapshotter starts tracking its history);
- `changed(ws, tiers, origin)`: tiers changed, by memd's writer (`"write"`, told after the batch is
  acknowledged), an adopted outside edit (`"external"`) or a sync's merged files (`"sync"`): snapshots,
  checkpoints and the search index follow (a restore from git commits itself; the search index catches up on the
  tiers' versions before each query);
- `before_destructive(ws, why, days)`: a retention sweep is about to delete or archive the day files `days`:
  commit them first (unless git holds each of them already, byte for byte) and say what git holds (None:
  snapshots are off or leave warm out, nothing to check against).

`Fanout` is the daemon's sink: the history keeper (the snapshotter) answers the first and last, and every
listener hears `changed`, each on its own (one failing is logged, never felt by the writer). Imports nothing of
memd at run time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from memd.retention import Held
    from memd.workspace import Workspace

log = logging.getLogger(__name__)

ChangeListener = Callable[["Workspace", frozenset[str], str], None]


class ChangeSink(Protocol):
    def registered(self, ws: Workspace) -> None: ...

    def changed(self, ws: Workspace, tiers: frozenset[str], origin: str) -> None: ...

    async def before_destructive(self, ws: Workspace, why: str, days: Sequence[str] = ()) -> Held | None: ...


class HistoryKeeper(Protocol):
    def track(self, ws: Workspace) -> None: ...

    async def before_destructive(self, ws: Workspace, why: str, days: Sequence[str] = ()) -> Held | None: ...


class NoSink:
    """A workspace on its own (tests, tools): nobody listens, nothing is committed before a sweep."""

    def registered(self, ws: Workspace) -> None:
        pass

    def changed(self, ws: Workspace, tiers: frozenset[str], origin: str) -> None:
        pass

    async def before_destructive(self, ws: Workspace, why: str, days: Sequence[str] = ()) -> Held | None:
        return None


class Fanout:
    def __init__(self, keeper: HistoryKeeper | None, listeners: Sequence[ChangeListener]) -> None:
        """`keeper`: None when nothing keeps history (nothing is committed before a sweep)."""
        self.keeper = keeper
        self.listeners = tuple(listeners)

    def registered(self, ws: Workspace) -> None:
        if self.keeper is not None:
            self.keeper.track(ws)

    def changed(self, ws: Workspace, tiers: frozenset[str], origin: str) -> None:
        for listener in self.listeners:
            try:
                listener(ws, tiers, origin)
            except Exception:
                log.exception("change listener failed for workspace %s", ws.name)

    async def before_destructive(self, ws: Workspace, why: str, days: Sequence[str] = ()) -> Held | None:
        return None if self.keeper is None else await self.keeper.before_destructive(ws, why, days)
