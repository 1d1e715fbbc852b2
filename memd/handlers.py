"""Protocol methods as plain functions in a table: method name -> (function, access kind).

Each function validates its params at this edge, then works on a Workspace. Writes go through
`Workspace.write` with an edit of the batch draft and return the workspace's token usage once durable.
Handlers never see sockets or config files; the daemon provides what they need through `Services`.
Imports memd.checkpoint, memd.snapshots, memd.context, memd.workspace, the tier formats, memd.params and
memd.errors.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any, Literal, Protocol

from memd import __version__
from memd.checkpoint import Checkpointer
from memd.context import build_context, recent_warm, render_cold
from memd.errors import AccessDenied, InvalidParams, MethodNotFound, UnknownWorkspace
from memd.params import MAX_LABEL, Params
from memd.snapshots import Snapshotter
from memd.tiers import cold_format, hot_format
from memd.tiers.warm_format import WarmEntry
from memd.workspace import Draft, Workspace

Access = Literal["public", "admin", "read", "write"]
RECENT_DECISIONS = 5
RECENT_ACTIVITY = 10


@dataclass(frozen=True, slots=True)
class Peer:
    pid: int
    uid: int
    gid: int
    groups: tuple[int, ...] = ()


class Services(Protocol):
    """What the daemon offers handlers (implemented by memd.daemon)."""

    own_uid: int
    snapshots: Snapshotter
    checkpoints: Checkpointer

    def workspaces(self) -> Mapping[str, Workspace]: ...

    def status(self) -> dict[str, Any]: ...

    async def reload(self) -> dict[str, Any]: ...

    async def sweep(self, workspace: str | None, dry_run: bool) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class Call:
    services: Services
    peer: Peer


Handler = Callable[[Call, Mapping[str, Any]], Awaitable[Any]]


def workspace_for(call: Call, raw: Mapping[str, Any], access: Access) -> Workspace:
    name = raw.get("workspace")
    if not isinstance(name, str) or not name:
        raise InvalidParams(
            "missing parameter 'workspace' (a workspace name; see workspace.list)", data={"param": "workspace"}
        )
    ws = call.services.workspaces().get(name)
    if ws is None:
        raise UnknownWorkspace(
            f"no workspace named {name!r}; configured and discovered: {', '.join(sorted(call.services.workspaces()))}",
            data={"workspace": name},
        )
    if not may_access(call, ws, access):
        raise AccessDenied(
            f"uid {call.peer.uid} may not {'write to' if access == 'write' else 'read'} workspace {name!r}",
            data={"workspace": name, "uid": call.peer.uid},
        )
    if access == "read":
        ws.refresh()
    return ws


def privileged(call: Call) -> bool:
    return call.peer.uid in (0, call.services.own_uid)


def may_access(call: Call, ws: Workspace, access: Access) -> bool:
    """Per-workspace rules: with `writers`/`readers` lists set, only those uids (and root, memd's own uid)."""
    if privileged(call) or not (ws.config.writers or ws.config.readers):
        return True
    allowed = ws.config.writers if access == "write" else (*ws.config.readers, *ws.config.writers)
    return call.peer.uid in allowed


def _result_with_usage(ws: Workspace, result: dict[str, Any]) -> dict[str, Any]:
    result["usage"] = ws.usage_dict()
    return result


# --- daemon-level methods ------------------------------------------------------------------------------------


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


# --- session and hot tier ------------------------------------------------------------------------------------


async def session_start(call: Call, raw: Mapping[str, Any]) -> Any:
    p = Params(raw, frozenset({"workspace", "task", "session_id", "topic"}))
    ws = workspace_for(call, raw, "write")
    task = p.optional_text("task", max_len=4 * MAX_LABEL, allow_empty=False)
    session_id = p.optional_text("session_id", max_len=MAX_LABEL, allow_empty=False)
    topic = p.optional_text("topic")

    def edit(draft: Draft) -> tuple[hot_format.HotDoc, bool, str]:
        before = draft.edit_hot()
        resuming = task is None or task == before.get("task")
        sid = (
            session_id
            or (str(before.get("session_id") or "") if resuming else "")
            or f"sess-{draft.local.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
        )
        after, resumed = hot_format.start_session(before, task, sid, draft.now)
        draft.set_hot(after)
        details = [("session_id", sid), ("task", str(after.get("task") or ""))]
        if not resumed and before.get("task"):
            details += [
                ("previous_task", str(before["task"])),
                ("previous_step", str(before.get("current_step") or "")),
            ]
        draft.log("session-resume" if resumed else "session-start", tuple(details))
        return before, resumed, sid

    before, resumed, sid = await ws.write(edit)
    call.services.snapshots.request(ws, "session start")
    doc = ws.hot.doc
    packet = _resume_packet(ws, doc, topic or str(doc.get("task") or ""))
    packet.update(session_id=sid, resumed=resumed)
    if not resumed and before.get("task"):
        packet["previous"] = {
            "session_id": before.get("session_id", ""),
            "task": before.get("task", ""),
            "current_step": before.get("current_step", ""),
            "pending_actions": before.get("pending_actions", []),
            "files_modified": before.get("files_modified", []),
        }
    return _result_with_usage(ws, packet)


def _resume_packet(ws: Workspace, doc: hot_format.HotDoc, topic: str) -> dict[str, Any]:
    activity: list[dict[str, Any]] = []
    for day, entries in recent_warm(ws, ws.config.warm.recent_days):
        for entry in reversed(entries):
            if len(activity) >= RECENT_ACTIVITY:
                break
            activity.append(_entry_json(day.isoformat(), entry))
    relevant = render_cold(cold_format.relevant(ws.cold.learnings, topic or None), ws.counter, ws.config.budget.cold)
    return {
        "task": doc.get("task", ""),
        "current_step": doc.get("current_step", ""),
        "pending_actions": doc.get("pending_actions", []),
        "files_modified": doc.get("files_modified", []),
        "recent_decisions": (doc.get("decisions") or [])[-RECENT_DECISIONS:],
        "relevant_learnings": [
            {"category": lr.category, "date": lr.date, "text": lr.text} for lr in relevant.learnings
        ],
        "recent_activity": activity,
        "context": build_context(ws, topic or None),
    }


async def progress_update(call: Call, raw: Mapping[str, Any]) -> Any:
    p = Params(raw, frozenset({"workspace", "step", "files", "pending_add", "pending_done"}))
    ws = workspace_for(call, raw, "write")
    step = p.optional_text("step", max_len=4 * MAX_LABEL)
    files, pending_add, pending_done = (
        p.text_list("files"),
        p.text_list("pending_add"),
        p.text_list("pending_done"),
    )

    def edit(draft: Draft) -> list[str]:
        doc, missing = hot_format.update_progress(draft.edit_hot(), step, files, pending_add, pending_done)
        draft.set_hot(doc)
        return missing

    missing = await ws.write(edit)
    doc = ws.hot.doc
    return _result_with_usage(
        ws,
        {
            "current_step": doc.get("current_step", ""),
            "files_modified": doc.get("files_modified", []),
            "pending_actions": doc.get("pending_actions", []),
            "not_pending": missing,
        },
    )


async def decision_record(call: Call, raw: Mapping[str, Any]) -> Any:
    p = Params(raw, frozenset({"workspace", "action", "reason", "risk"}))
    ws = workspace_for(call, raw, "write")
    action = p.text("action", max_len=MAX_LABEL)
    reason = p.text("reason", allow_empty=True)
    risk = p.optional_text("risk", max_len=MAX_LABEL)

    def edit(draft: Draft) -> dict[str, Any]:
        doc, decision = hot_format.add_decision(draft.edit_hot(), action, reason, risk, draft.now)
        draft.set_hot(doc)
        details = [("reason", reason)] + ([("risk", risk)] if risk is not None else [])
        draft.log(f"decision: {action}", tuple(details))
        return decision

    decision = await ws.write(edit)
    return _result_with_usage(ws, {"decision": decision})


async def hot_note(call: Call, raw: Mapping[str, Any]) -> Any:
    p = Params(raw, frozenset({"workspace", "text"}))
    ws = workspace_for(call, raw, "write")
    text = p.text("text")

    def edit(draft: Draft) -> dict[str, Any]:
        doc, note = hot_format.add_note(draft.edit_hot(), text, draft.now)
        draft.set_hot(doc)
        return note

    note = await ws.write(edit)
    return _result_with_usage(ws, {"note": note})


async def hot_get(call: Call, raw: Mapping[str, Any]) -> Any:
    Params(raw, frozenset({"workspace"}))
    ws = workspace_for(call, raw, "read")
    result: dict[str, Any] = {"hot": ws.hot.doc, "rendered": "".join(hot_format.render_lines(ws.hot.doc))}
    if ws.hot.error is not None:
        result["error"] = ws.hot.error.message
    return _result_with_usage(ws, result)


# --- warm tier -----------------------------------------------------------------------------------------------


def _entry_json(day: str, entry: WarmEntry) -> dict[str, Any]:
    out: dict[str, Any] = {
        "date": day,
        "time": entry.time,
        "action": entry.action,
        "details": dict(entry.details),
    }
    if entry.result is not None:
        out["result"] = entry.result
    if entry.extra:
        out["extra"] = entry.extra
    return out


async def warm_log(call: Call, raw: Mapping[str, Any]) -> Any:
    p = Params(raw, frozenset({"workspace", "action", "details", "result"}))
    ws = workspace_for(call, raw, "write")
    action = p.text("action", max_len=MAX_LABEL)
    details = p.details("details")
    result = p.optional_text("result")

    def edit(draft: Draft) -> dict[str, Any]:
        entry = draft.log(action, details, result)
        return _entry_json(draft.local.date().isoformat(), entry)

    entry = await ws.write(edit)
    return _result_with_usage(ws, {"entry": entry})


async def warm_recent(call: Call, raw: Mapping[str, Any]) -> Any:
    p = Params(raw, frozenset({"workspace", "days"}))
    ws = workspace_for(call, raw, "read")
    days = p.integer("days", ws.config.warm.recent_days, minimum=1, maximum=3660)
    return _result_with_usage(
        ws,
        {
            "days": [
                {"date": d.isoformat(), "entries": [_entry_json(d.isoformat(), e) for e in entries]}
                for d, entries in recent_warm(ws, days)
            ]
        },
    )


async def warm_day(call: Call, raw: Mapping[str, Any]) -> Any:
    p = Params(raw, frozenset({"workspace", "date"}))
    ws = workspace_for(call, raw, "read")
    text = p.text("date", max_len=10)
    try:
        day = date.fromisoformat(text)
    except ValueError:
        raise InvalidParams(f"parameter 'date' must be YYYY-MM-DD, not {text!r}", data={"param": "date"}) from None
    entries, source = ws.day_entries(day)
    return {"date": day.isoformat(), "source": source, "entries": [_entry_json(day.isoformat(), e) for e in entries]}


async def retention_sweep(call: Call, raw: Mapping[str, Any]) -> Any:
    p = Params(raw, frozenset({"workspace", "dry_run"}))
    dry_run = p.flag("dry_run")
    name = None
    if raw.get("workspace") is not None:
        name = workspace_for(call, raw, "write").name
    elif not privileged(call):
        raise AccessDenied("sweeping every workspace needs the daemon's uid or root; name a workspace")
    return await call.services.sweep(name, dry_run)


# --- cold tier -----------------------------------------------------------------------------------------------


async def cold_learn(call: Call, raw: Mapping[str, Any]) -> Any:
    p = Params(raw, frozenset({"workspace", "category", "learning"}))
    ws = workspace_for(call, raw, "write")
    category = p.text("category", max_len=MAX_LABEL)
    learning = p.text("learning")

    def edit(draft: Draft) -> str:
        return draft.learn(category.strip(), learning)

    day = await ws.write(edit)
    return _result_with_usage(ws, {"learning": {"category": category.strip(), "date": day, "text": learning}})


async def cold_get(call: Call, raw: Mapping[str, Any]) -> Any:
    p = Params(raw, frozenset({"workspace", "topic"}))
    ws = workspace_for(call, raw, "read")
    topic = p.optional_text("topic")
    relevant = cold_format.relevant(ws.cold.learnings, topic)
    section = render_cold(relevant, ws.counter, ws.config.budget.cold)
    return _result_with_usage(
        ws,
        {
            "learnings": [{"category": lr.category, "date": lr.date, "text": lr.text} for lr in section.learnings],
            "omitted": section.omitted,
            "text": section.text,
        },
    )


async def context_get(call: Call, raw: Mapping[str, Any]) -> Any:
    p = Params(raw, frozenset({"workspace", "topic"}))
    ws = workspace_for(call, raw, "read")
    return build_context(ws, p.optional_text("topic"))


# --- snapshots and history ----------------------------------------------------------------------------------


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
    paths = p.text_list("paths") or list(call.services.snapshots.config.paths)
    return {"diff": await call.services.snapshots.diff(ws, rev, rev2, paths)}


async def snapshot_restore(call: Call, raw: Mapping[str, Any]) -> Any:
    p = Params(raw, frozenset({"workspace", "rev", "paths"}))
    ws = workspace_for(call, raw, "write")
    paths = p.text_list("paths") or list(call.services.snapshots.config.paths)
    result = await call.services.snapshots.restore(ws, p.text("rev", max_len=MAX_LABEL), paths)
    return _result_with_usage(ws, result)


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
    return _result_with_usage(ws, {"checkpoint": record})


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
}


async def dispatch(call: Call, method: str, params: Mapping[str, Any]) -> Any:
    entry = METHODS.get(method)
    if entry is None:
        raise MethodNotFound(f"unknown method {method!r}; see docs/protocol.md for the list", data={"method": method})
    handler, access = entry
    if access == "admin" and not privileged(call):
        raise AccessDenied(f"{method} is for root or memd's own uid, not uid {call.peer.uid}", data={"method": method})
    return await handler(call, params)
