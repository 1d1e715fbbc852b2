"""Snapshot, history and checkpoint methods: git-backed inspection, restore, push, compaction.

Imports memd.handlers.access, memd.snapshot_history, memd.snapshot_push and memd.params.
"""

from __future__ import annotations

from typing import Any

from memd import snapshot_history
from memd.handlers.access import Call, result_with_usage
from memd.params import Params
from memd.snapshot_push import push_all, reset_push


async def snapshot_run(call: Call, p: Params) -> Any:
    ws = call.ws
    reason = p.optional_text("reason") or "requested"
    rev, created = await call.services.snapshots.snapshot(ws, reason)
    return {"rev": rev or None, "created": created, "snapshot": call.services.snapshots.status_for(ws.name)}


async def history_list(call: Call, p: Params) -> Any:
    path = p.optional_text("path")
    return {"commits": await snapshot_history.history(call.services.snapshots, call.ws, path, p.integer("limit"))}


async def history_show(call: Call, p: Params) -> Any:
    data = await snapshot_history.show(call.services.snapshots, call.ws, p.text("rev"), p.text("path"))
    return {"content": data.decode("utf-8", "replace")}


async def history_diff(call: Call, p: Params) -> Any:
    rev, rev2 = p.text("rev"), p.optional_text("rev2")
    paths = p.text_list("paths") or list(call.services.snapshots.config.paths)
    return {"diff": await snapshot_history.diff(call.services.snapshots, call.ws, rev, rev2, paths)}


async def snapshot_restore(call: Call, p: Params) -> Any:
    ws = call.ws
    paths = p.text_list("paths") or list(call.services.snapshots.config.paths)
    result = await snapshot_history.restore(call.services.snapshots, ws, p.text("rev"), paths)
    return result_with_usage(ws, result)


async def snapshot_push(call: Call, p: Params) -> Any:
    ws = call.ws
    reset_push(call.services.snapshots, ws.name)
    results = await push_all(call.services.snapshots)
    return {"result": results.get(ws.name, "nothing to push"), "snapshot": call.services.snapshots.status_for(ws.name)}


async def snapshot_sync(call: Call, p: Params) -> Any:
    ws = call.ws
    report = await call.services.syncer.sync(ws)  # Unavailable without a remote
    return {"sync": report, "snapshot": call.services.snapshots.status_for(ws.name)}


# --- checkpoints ----------------------------------------------------------------------------------------------


async def checkpoint_run(call: Call, p: Params) -> Any:
    ws = call.ws
    record = await call.services.checkpoints.run(ws, force=p.flag("force"))
    return result_with_usage(ws, {"checkpoint": record})


async def checkpoint_list(call: Call, p: Params) -> Any:
    ws = call.ws
    return {
        "checkpoints": list(ws.hot.doc.get("checkpoints") or []),
        "status": call.services.checkpoints.status_for(ws.name),
    }


async def checkpoint_show(call: Call, p: Params) -> Any:
    return await call.services.checkpoints.show(call.ws, p.text("id"))


async def checkpoint_undo(call: Call, p: Params) -> Any:
    ws = call.ws
    result = await call.services.checkpoints.undo(ws, p.text("id"))
    return result_with_usage(ws, {"undone": result})
