"""Daemon-level methods: ping, status, workspace.list, config.reload. Imports memd.handlers.access, memd.params."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memd import __version__
from memd.handlers.access import Call, may_access, privileged
from memd.params import Params


async def ping(call: Call, raw: Mapping[str, Any]) -> Any:
    Params(raw, frozenset())
    return {"pong": True, "version": __version__}


async def status(call: Call, raw: Mapping[str, Any]) -> Any:
    Params(raw, frozenset())
    result = call.services.status()
    if not privileged(call):  # others see only the workspaces they may read
        visible = {n for n, ws in call.services.workspaces().items() if may_access(call, ws, "read")}
        result["workspaces"] = {n: v for n, v in result["workspaces"].items() if n in visible}
    return result


async def workspace_list(call: Call, raw: Mapping[str, Any]) -> Any:
    Params(raw, frozenset())
    return {
        "workspaces": [
            {"name": name, "path": str(ws.root), "usage": ws.usage_dict()}
            for name, ws in sorted(call.services.workspaces().items())
            if may_access(call, ws, "read")
        ]
    }


async def config_reload(call: Call, raw: Mapping[str, Any]) -> Any:
    Params(raw, frozenset())
    return await call.services.reload()
