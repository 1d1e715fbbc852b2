"""The `status` answer: the workspaces it reports (all, or the ones a peer may read), each one's health, the
problems `status {summary: true}` lists it for (with its counts), and what a peer who may read only some
workspaces is shown of the daemon-wide parts. Pure functions of the workspaces and their snapshot and checkpoint
state; memd.daemon hands in the daemon-wide parts (process, socket, server, reload, and its components' own
status) and `assemble` adds the rest. Imports memd.checkpoint, memd.snapshots and memd.workspace.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from memd.checkpoint import Checkpointer
from memd.snapshots import Snapshotter
from memd.workspace import Workspace

# What `status {summary: true}` counts; the names after "workspaces" and "pending_writes" are the problems a
# workspace is listed for (over_budget once per tier over its budget).
SUMMARY_COUNTS = (
    "workspaces", "pending_writes", "write_fault", "identity_error", "file_errors", "over_budget", "snapshot_error",
    "checkpoint_failing",
)  # fmt: skip


def assemble(
    result: dict[str, Any],
    served: Mapping[str, Workspace],
    snapshots: Snapshotter,
    checkpoints: Checkpointer,
    summary: bool = False,
    only: Collection[str] | None = None,
) -> dict[str, Any]:
    """The daemon's health: `result` (the daemon-wide parts, completed in place) with the workspaces of `served`.
    `only`: the workspaces to report (None: all). `summary`: counts, and only the workspaces with a problem (a fault,
    a file memd cannot parse, a tier over its budget, a failing snapshot or checkpoint): cheap at thousands of
    workspaces."""
    names = sorted(served if only is None else (n for n in only if n in served))
    if only is not None:
        only_for(result, set(names))
    if not summary:
        result["workspaces"] = {name: workspace_status(served[name], snapshots, checkpoints) for name in names}
        return result
    sync = result["sync"]
    sync["discovered"] = len(sync.get("discovered") or ())  # a count, not thousands of names
    counts = dict.fromkeys(SUMMARY_COUNTS, 0)
    listed: dict[str, Any] = {}
    for name in names:
        ws = served[name]
        counts["workspaces"] += 1
        counts["pending_writes"] += ws.pending
        found = problems(ws, snapshots, checkpoints)
        for problem in found:
            counts[problem.partition(":")[0]] += 1
        if found:
            listed[name] = {"problems": found, **workspace_status(ws, snapshots, checkpoints)}
    result.update(summary=True, counts=counts, workspaces=listed)
    return result


def only_for(result: dict[str, Any], names: set[str]) -> None:
    """What a peer who may read only `names` is shown of the daemon-wide parts of status: nothing that names
    or locates another workspace (counts instead of other names and paths)."""
    reload = result["last_reload"]
    if reload:
        shown = {"at": reload.get("at"), "reloaded": reload.get("reloaded")}
        if "workspaces" in reload:
            shown["workspaces"] = [n for n in reload["workspaces"] if n in names]
        result["last_reload"] = shown
    sync = result["sync"]
    sync["discovered"] = [n for n in sync.get("discovered") or () if n in names]
    sync["refused"] = len(sync.get("refused") or {})
    sync["discovery_conflicts"] = len(sync.get("discovery_conflicts") or {})
    watcher = sync.get("watcher") or {}
    if "polled_paths" in watcher:
        watcher["polled_paths"] = len(watcher["polled_paths"])
    search = result["search"]
    search["pending"] = [n for n in search.get("pending") or () if n in names]


def problems(ws: Workspace, snapshots: Snapshotter, checkpoints: Checkpointer) -> list[str]:
    """What `status {summary: true}` lists a workspace for; each name is a key of its `counts`."""
    problems = []
    if ws.health.write_fault:
        problems.append("write_fault")
    if ws.health.identity_error:
        problems.append("identity_error")
    if ws.hot.error is not None or ws.cold.error is not None or ws.warm.errors:
        problems.append("file_errors")
    usage = ws.usage_dict()
    problems += [f"over_budget:{t}" for t, u in usage.items() if u["budget"] and u["tokens"] > u["budget"]]
    if snapshots.status_for(ws.name).get("state") in ("error", "repo-unsafe"):
        problems.append("snapshot_error")
    if checkpoints.status_for(ws.name).get("consecutive_failures"):
        problems.append("checkpoint_failing")
    return problems


def workspace_status(ws: Workspace, snapshots: Snapshotter, checkpoints: Checkpointer) -> dict[str, Any]:
    errors: dict[str, Any] = {
        tier: s.error.message for tier, s in (("hot", ws.hot), ("cold", ws.cold)) if s.error is not None
    }
    if ws.warm.errors:
        errors["warm"] = {day.isoformat(): why for day, why in sorted(ws.warm.errors.items())}
    return {
        "path": str(ws.root),
        "usage": ws.usage_dict(),
        "pending_writes": ws.pending,
        "writes": ws.health.writes,
        "batches": ws.health.batches,
        "write_fault": ws.health.write_fault,
        "last_write_error": ws.health.last_write_error or None,
        "last_write_error_at": ws.health.last_write_error_at or None,
        "replans": ws.health.replans,
        "early_answers": ws.health.early_answers,
        "early_usage_mismatches": ws.health.early_usage_mismatches,
        "identity_error": ws.health.identity_error or None,
        "file_errors": errors,
        "last_sweep": ws.last_sweep or None,
        "snapshot": snapshots.status_for(ws.name),
        "checkpoint": checkpoints.status_for(ws.name),
    }
