"""Protocol methods as plain functions in a table: method name -> handler. What each method is (its parameters,
access kind, scope, whether it may run without a Task) is declared once in memd.methods.

`dispatch` does, from the declaration and before the handler runs: refuse unknown parameters, refuse an admin
method to anyone but root and memd's uid, resolve the workspace and check the peer may read or write it (or, for
a method whose workspace is optional-admin and absent, that the peer may act on every workspace). The handler gets
the resolved workspace in `call.ws` (`call.workspace`, None when an optional one is absent) and validated values
from `Params`. Imports the modules of this package,
memd.methods, memd.params and memd.errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memd.errors import AccessDenied, MethodNotFound
from memd.handlers.access import Call, Handler, Peer, Services, privileged, workspace_for
from memd.handlers.admin import config_reload, metrics, ping, status, workspace_list
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
    snapshot_sync,
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
from memd.handlers.proposals import proposals_accept, proposals_list, proposals_reject
from memd.handlers.search import memory_reindex, memory_search
from memd.methods import DECLARED
from memd.params import Params

__all__ = ["METHODS", "TASKLESS", "Call", "Peer", "Services", "dispatch"]

# One handler per declared method (a test checks both ways).
METHODS: dict[str, Handler] = {
    "ping": ping,
    "status": status,
    "metrics": metrics,
    "workspace.list": workspace_list,
    "config.reload": config_reload,
    "session.start": session_start,
    "progress.update": progress_update,
    "decision.record": decision_record,
    "hot.note": hot_note,
    "hot.get": hot_get,
    "warm.log": warm_log,
    "warm.recent": warm_recent,
    "warm.day": warm_day,
    "retention.sweep": retention_sweep,
    "cold.learn": cold_learn,
    "cold.get": cold_get,
    "proposals.list": proposals_list,
    "proposals.accept": proposals_accept,
    "proposals.reject": proposals_reject,
    "context.get": context_get,
    "memory.search": memory_search,
    "memory.reindex": memory_reindex,
    "snapshot.run": snapshot_run,
    "snapshot.restore": snapshot_restore,
    "snapshot.push": snapshot_push,
    "snapshot.sync": snapshot_sync,
    "history.list": history_list,
    "history.show": history_show,
    "history.diff": history_diff,
    "checkpoint.run": checkpoint_run,
    "checkpoint.list": checkpoint_list,
    "checkpoint.show": checkpoint_show,
    "checkpoint.undo": checkpoint_undo,
}

# Methods whose handlers await nothing but Workspace.write (or nothing at all): the server may run them without a
# Task. A handler that awaits a lock, a timeout, git or the summarizer must not be declared taskless.
TASKLESS = frozenset(m.name for m in DECLARED.values() if m.taskless)


async def dispatch(call: Call, method: str, raw: Mapping[str, Any]) -> Any:
    declared = DECLARED.get(method)
    handler = METHODS.get(method)
    if declared is None or handler is None:
        raise MethodNotFound(f"unknown method {method!r}; see docs/protocol.md for the list", data={"method": method})
    params = Params(raw, declared)
    if declared.access == "admin" and not privileged(call):
        raise AccessDenied(f"{method} is for root or memd's own uid, not uid {call.peer.uid}", data={"method": method})
    if declared.workspace == "required" or (declared.workspace != "none" and raw.get("workspace") is not None):
        ws = workspace_for(call, raw, declared.access, not declared.reads_index)
        call = Call(call.services, call.peer, ws, call.reply_to)
    elif declared.workspace == "optional-admin" and not privileged(call):
        raise AccessDenied(
            f"{method} without a workspace acts on every workspace, which is for root or memd's own uid; "
            "name a workspace",
            data={"method": method},
        )
    return await handler(call, params)
