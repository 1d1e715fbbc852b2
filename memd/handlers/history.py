"""Snapshot, history and checkpoint methods: git-backed inspection, restore, push, compaction.

Imports memd.handlers.access and memd.params.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memd.handlers.access import Call, result_with_usage, workspace_for
from memd.params import MAX_LABEL, Params


async def snapshot_run(call: Call, raw: Mapping[str, Any]) -> Any:
    p = Params(raw, frozenset({"workspace", "reason"}))
    ws = workspace_for(call, raw, "write")
    reason = p.optional_text("reason", max_len=MAX_LABEL, allow_empty=False) or "requested"
    rev, created = await call.services.snapshots.snapshot(ws, reason)
    return {"rev": rev or None, "created": created, "snapshot": call.services.snapshots.status_for(ws.name)}


async def history_list(call: Call, raw: Mapping[str, Any]) -> Any:
    p = Params(raw, frozenset({"workspace", "path", "limit"}))
    ws = workspace_for(call, raw, "read")
    path = p.optional_text("path", max_len=MAX_LABEL, allow_empty=False)
    limit = p.integer("limit", 50, minimum=1, maximum=10_000)
    return {"commits": await call.services.snapshots.history(ws, path, limit)}


async def history_show(call: Call, raw: Mapping[str, Any]) -> Any:
    p = Params(raw, frozenset({"workspace", "rev", "path"}))
    ws = workspace_for(call, raw, "read")
    data = await call.services.snapshots.show(ws, p.text("rev", max_len=MAX_LABEL), p.text("path", max_len=MAX_LABEL))
    return {"content": data.decode("utf-8", "replace")}


async def history_diff(call: Call, raw: Mapping[str, Any]) -> Any:
    p = Params(raw, frozenset({"workspace", "rev", "rev2", "paths"}))
    ws = workspace_for(call, raw, "read")
    rev, rev2 = p.text("rev", max_len=MAX_LABEL), p.optional_text("rev2", max_len=MAX_LABEL, allow_empty=False)
    paths = p.text_list("paths", max_len=MAX_LABEL, max_items=64) or list(call.services.snapshots.config.paths)
    return {"diff": await call.services.snapshots.diff(ws, rev, rev2, paths)}


async def snapshot_restore(call: Call, raw: Mapping[str, Any]) -> Any:
    p = Params(raw, frozenset({"workspace", "rev", "paths"}))
    ws = workspace_for(call, raw, "write")
    paths = p.text_list("paths", max_len=MAX_LABEL, max_items=64) or list(call.services.snapshots.config.paths)
    result = await call.services.snapshots.restore(ws, p.text("rev", max_len=MAX_LABEL), paths)
    return result_with_usage(ws, result)


async def snapshot_push(call: Call, raw: Mapping[str, Any]) -> Any:
    Params(raw, frozenset({"workspace"}))
    ws = workspace_for(call, raw, "write")
    call.services.snapshots.reset_push(ws.name)
    results = await call.services.snapshots.push_all()
    return {"result": results.get(ws.name, "nothing to push"), "snapshot": call.services.snapshots.status_for(ws.name)}


# --- checkpoints ----------------------------------------------------------------------------------------------


async def checkpoint_run(call: Call, raw: Mapping[str, Any]) -> Any:
    p = Params(raw, frozenset({"workspace", "force"}))
    ws = workspace_for(call, raw, "write")
    force = p.flag("force", default=True)
    record = await call.services.checkpoints.run(ws, force=force)
    return result_with_usage(ws, {"checkpoint": record})


async def checkpoint_list(call: Call, raw: Mapping[str, Any]) -> Any:
    Params(raw, frozenset({"workspace"}))
    ws = workspace_for(call, raw, "read")
    return {
        "checkpoints": list(ws.hot.doc.get("checkpoints") or []),
        "status": call.services.checkpoints.status_for(ws.name),
    }


async def checkpoint_show(call: Call, raw: Mapping[str, Any]) -> Any:
    p = Params(raw, frozenset({"workspace", "id"}))
    ws = workspace_for(call, raw, "read")
    return await call.services.checkpoints.show(ws, p.text("id", max_len=MAX_LABEL))


async def checkpoint_undo(call: Call, raw: Mapping[str, Any]) -> Any:
    p = Params(raw, frozenset({"workspace", "id"}))
    ws = workspace_for(call, raw, "write")
    result = await call.services.checkpoints.undo(ws, p.text("id", max_len=MAX_LABEL))
    return result_with_usage(ws, {"undone": result})
