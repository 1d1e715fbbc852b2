"""Daemon-level methods: ping, status, metrics, workspace.list, config.reload. Imports memd.handlers.access,
memd.params."""

from __future__ import annotations

from typing import Any

from memd import __version__
from memd.handlers.access import Call, may_access, privileged
from memd.params import Params

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # Prometheus' text exposition format


async def ping(call: Call, p: Params) -> Any:
    return {"pong": True, "version": __version__}


async def status(call: Call, p: Params) -> Any:
    only = None
    if not privileged(call):  # others see (and have counted) only the workspaces they may read
        only = {n for n, ws in call.services.workspaces().items() if may_access(call, ws, "read")}
    return call.services.status(summary=p.flag("summary"), only=only)


async def metrics(call: Call, p: Params) -> Any:
    # Admin only (the declaration): the series name every workspace, whoever may read it.
    return {"text": call.services.metrics_text().decode("utf-8"), "content_type": CONTENT_TYPE}


async def workspace_list(call: Call, p: Params) -> Any:
    # `project`: the project directory the workspace is bound to, so that front ends find a project's workspace
    # (memd.frontends.project) without reading anything but this answer.
    return {
        "workspaces": [
            {
                "name": name,
                "path": str(ws.root),
                "project": str(ws.config.project) if ws.config.project is not None else None,
                "usage": ws.usage_dict(),
            }
            for name, ws in sorted(call.services.workspaces().items())
            if may_access(call, ws, "read")
        ]
    }


async def config_reload(call: Call, p: Params) -> Any:
    return await call.services.reload()
