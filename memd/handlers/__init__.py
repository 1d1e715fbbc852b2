"""Protocol methods as plain functions in a table: method name -> (function, access kind).

Handlers never see sockets or config files; the daemon provides what they need through `Services`.
`dispatch` enforces the access kind "admin"; per-workspace rules are checked by `workspace_for`.
Imports the modules of this package and memd.errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memd.errors import AccessDenied, MethodNotFound
from memd.handlers.access import Access, Call, Handler, Peer, Services, privileged
from memd.handlers.admin import config_reload, ping, status, workspace_list
from memd.handlers.history import (
    checkpoint_list,
    checkpoint_run,
    checkpoint_show,
    checkpoint_undo,
    history_diff,
    history_list,
    history_show,
    snapshot_push,
    snapshot_restore,
    snapshot_run,
)
from memd.handlers.memory import (
    cold_get,
    cold_learn,
    context_get,
    decision_record,
    hot_get,
    hot_note,
    progress_update,
    retention_sweep,
    session_start,
    warm_day,
    warm_log,
    warm_recent,
)

__all__ = ["METHODS", "TASKLESS", "Call", "Peer", "Services", "dispatch"]

METHODS: dict[str, tuple[Handler, Access]] = {
    "ping": (ping, "public"),
    "status": (status, "read"),
    "workspace.list": (workspace_list, "read"),
    "config.reload": (config_reload, "admin"),
    "session.start": (session_start, "write"),
    "progress.update": (progress_update, "write"),
    "decision.record": (decision_record, "write"),
    "hot.note": (hot_note, "write"),
    "hot.get": (hot_get, "read"),
    "warm.log": (warm_log, "write"),
    "warm.recent": (warm_recent, "read"),
    "warm.day": (warm_day, "read"),
    "retention.sweep": (retention_sweep, "write"),
    "cold.learn": (cold_learn, "write"),
    "cold.get": (cold_get, "read"),
    "context.get": (context_get, "read"),
    "snapshot.run": (snapshot_run, "write"),
    "snapshot.restore": (snapshot_restore, "write"),
    "snapshot.push": (snapshot_push, "write"),
    "history.list": (history_list, "read"),
    "history.show": (history_show, "read"),
    "history.diff": (history_diff, "read"),
    "checkpoint.run": (checkpoint_run, "write"),
    "checkpoint.list": (checkpoint_list, "read"),
    "checkpoint.show": (checkpoint_show, "read"),
    "checkpoint.undo": (checkpoint_undo, "write"),
}

# Handlers that await nothing but Workspace.write (or nothing at all): the server may run them without a Task.
# One that awaits a lock, a timeout, git or the summarizer does not belong here.
TASKLESS = frozenset(
    {
        "ping",
        "status",
        "workspace.list",
        "session.start",
        "progress.update",
        "decision.record",
        "hot.note",
        "hot.get",
        "warm.log",
        "warm.recent",
        "cold.learn",
        "cold.get",
        "context.get",
    }
)


async def dispatch(call: Call, method: str, params: Mapping[str, Any]) -> Any:
    entry = METHODS.get(method)
    if entry is None:
        raise MethodNotFound(f"unknown method {method!r}; see docs/protocol.md for the list", data={"method": method})
    handler, access = entry
    if access == "admin" and not privileged(call):
        raise AccessDenied(f"{method} is for root or memd's own uid, not uid {call.peer.uid}", data={"method": method})
    return await handler(call, params)
