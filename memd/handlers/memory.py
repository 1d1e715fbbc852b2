"""The tiers' methods: session start, progress, decisions, notes, warm log and retention, learnings, context.

Each validates its params at this edge; writes go through `Workspace.write` with an edit of the batch draft and
return the workspace's token usage once durable. `cold.get` and `context.get` rank learnings by topic with the
search index (memd.handlers.search). Imports memd.handlers.access, memd.handlers.search, memd.context,
memd.workspace, the tier formats, the hot tier's rendering (memd.tiers.hot_render), memd.params and memd.errors.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from datetime import date
from typing import Any

from memd.batch import Draft
from memd.context import Position, Recent, build_context, load_recent, recent_page, render_cold
from memd.errors import InvalidParams
from memd.handlers.access import Call, result_with_usage
from memd.handlers.proposals import context_section
from memd.handlers.search import ranked_learnings
from memd.params import Params
from memd.tiers import hot_format, hot_render
from memd.tiers.warm_format import WarmEntry
from memd.workspace import Workspace

RECENT_DECISIONS = 5
RECENT_NOTES = 10
RECENT_ACTIVITY = 10


async def session_start(call: Call, p: Params) -> Any:
    ws = call.ws
    task = p.optional_text("task")
    session_id = p.optional_text("session_id")
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
    recent = await load_recent(ws, ws.config.warm.recent_days)  # a big day is parsed off the loop
    doc = ws.hot.doc
    packet = _resume_packet(ws, doc, topic or str(doc.get("task") or ""), recent)
    packet.update(session_id=sid, resumed=resumed)
    if not resumed and before.get("task"):
        packet["previous"] = {
            "session_id": before.get("session_id", ""),
            "task": before.get("task", ""),
            "current_step": before.get("current_step", ""),
            "pending_actions": before.get("pending_actions", []),
            "files_modified": before.get("files_modified", []),
        }
    return result_with_usage(ws, packet)


def _resume_packet(ws: Workspace, doc: hot_format.HotDoc, topic: str, recent: Recent) -> dict[str, Any]:
    activity: list[dict[str, Any]] = []
    for day, entries in recent:
        for entry in reversed(entries):
            if len(activity) >= RECENT_ACTIVITY:
                break
            activity.append(_entry_json(day.isoformat(), entry))
    relevant = render_cold(ws.cold.parsed.relevant(topic or None), ws.counter, ws.config.budget.cold)
    return {
        "task": doc.get("task", ""),
        "current_step": doc.get("current_step", ""),
        "pending_actions": doc.get("pending_actions", []),
        "files_modified": doc.get("files_modified", []),
        "recent_decisions": (doc.get("decisions") or [])[-RECENT_DECISIONS:],
        "recent_notes": (doc.get("notes") or [])[-RECENT_NOTES:],
        "relevant_learnings": [
            {"category": lr.category, "date": lr.date, "text": lr.text} for lr in relevant.learnings
        ],
        "recent_activity": activity,
        "context": build_context(ws, topic or None, recent=recent),
    }


async def progress_update(call: Call, p: Params) -> Any:
    ws = call.ws
    step = p.optional_text("step")
    files, pending_add, pending_done = (
        p.text_list("files"),
        p.text_list("pending_add"),
        p.text_list("pending_done"),
    )

    def edit(draft: Draft) -> tuple[list[str], Draft]:
        doc, missing = hot_format.update_progress(draft.edit_hot(), step, files, pending_add, pending_done)
        draft.set_hot(doc)
        return missing, draft

    def answer(done: tuple[list[str], Draft], usage: Mapping[str, Any]) -> dict[str, Any]:
        missing, draft = done  # the draft as the whole batch left it: what the hot tier will hold once published
        return _progress(draft.hot or {}, missing) | {"usage": usage}

    missing, _ = await ws.write(edit, call.early(answer))
    return result_with_usage(ws, _progress(ws.hot.doc, missing))


def _progress(doc: hot_format.HotDoc, missing: list[str]) -> dict[str, Any]:
    return {
        "current_step": doc.get("current_step", ""),
        "files_modified": doc.get("files_modified", []),
        "pending_actions": doc.get("pending_actions", []),
        "not_pending": missing,
    }


async def decision_record(call: Call, p: Params) -> Any:
    ws = call.ws
    action = p.text("action")
    reason = p.text("reason")
    risk = p.optional_text("risk")

    def edit(draft: Draft) -> dict[str, Any]:
        decision = draft.add_decision(action, reason, risk)
        details = [("reason", reason)] + ([("risk", risk)] if risk is not None else [])
        draft.log(f"decision: {action}", tuple(details))
        return decision

    decision = await ws.write(edit, call.early(lambda decision, usage: {"decision": decision, "usage": usage}))
    return result_with_usage(ws, {"decision": decision})


async def hot_note(call: Call, p: Params) -> Any:
    ws = call.ws
    text = p.text("text")

    def edit(draft: Draft) -> dict[str, Any]:
        return draft.add_note(text)

    note = await ws.write(edit, call.early(lambda note, usage: {"note": note, "usage": usage}))
    return result_with_usage(ws, {"note": note})


async def hot_get(call: Call, p: Params) -> Any:
    ws = call.ws
    result: dict[str, Any] = {"hot": ws.hot.doc, "rendered": "".join(hot_render.render_lines(ws.hot.doc))}
    if ws.hot.error is not None:
        result["error"] = ws.hot.error.message
    return result_with_usage(ws, result)


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


async def warm_log(call: Call, p: Params) -> Any:
    ws = call.ws
    action = p.text("action")
    details = p.details("details")
    result = p.optional_text("result")

    def edit(draft: Draft) -> dict[str, Any]:
        entry = draft.log(action, details, result)
        return _entry_json(draft.local.date().isoformat(), entry)

    entry = await ws.write(edit, call.early(lambda entry, usage: {"entry": entry, "usage": usage}))
    return result_with_usage(ws, {"entry": entry})


async def warm_recent(call: Call, p: Params) -> Any:
    ws = call.ws
    days = p.integer("days", ws.config.warm.recent_days)
    page, after = await recent_page(ws, days, p.integer("limit"), _position(p.optional_text("before")))
    return result_with_usage(
        ws,
        {
            "days": [
                {"date": d.isoformat(), "entries": [_entry_json(d.isoformat(), e) for e in entries]}
                for d, entries in page
            ],
            "next": None if after is None else after[0].isoformat() + ("" if after[1] is None else f"#{after[1]}"),
        },
    )


def _position(text: str | None) -> Position | None:
    """A page position as `warm.recent` returns it in `next`: YYYY-MM-DD, or YYYY-MM-DD#INDEX."""
    if text is None:
        return None
    day, _, index = text.partition("#")
    try:
        position = date.fromisoformat(day), (int(index) if index else None)
        if (position[1] or 0) < 0:
            raise ValueError(index)
        return position
    except ValueError:
        raise InvalidParams(
            f"parameter 'before' must be the `next` of a previous page (YYYY-MM-DD or YYYY-MM-DD#N), not {text!r}",
            data={"param": "before"},
        ) from None


async def warm_day(call: Call, p: Params) -> Any:
    ws = call.ws
    text = p.text("date")
    try:
        day = date.fromisoformat(text)
    except ValueError:
        raise InvalidParams(f"parameter 'date' must be YYYY-MM-DD, not {text!r}", data={"param": "date"}) from None
    entries, source = await ws.read_day(day)
    return {"date": day.isoformat(), "source": source, "entries": [_entry_json(day.isoformat(), e) for e in entries]}


async def retention_sweep(call: Call, p: Params) -> Any:
    # Without a workspace, dispatch admitted only root and memd's uid (the declaration's optional-admin scope).
    name = call.workspace.name if call.workspace is not None else None
    return await call.services.sweep(name, p.flag("dry_run"), p.flag("confirm"))


# --- cold tier -----------------------------------------------------------------------------------------------


async def cold_learn(call: Call, p: Params) -> Any:
    ws = call.ws
    category = p.text("category")
    learning = p.text("learning")

    def edit(draft: Draft) -> str:
        return draft.learn(category.strip(), learning)

    day = await ws.write(edit)
    return result_with_usage(ws, {"learning": {"category": category.strip(), "date": day, "text": learning}})


async def cold_get(call: Call, p: Params) -> Any:
    ws = call.ws
    topic = p.optional_text("topic")
    ranked = await ranked_learnings(call, ws, topic)
    relevant = ranked if ranked is not None else ws.cold.parsed.relevant(topic)
    section = render_cold(relevant, ws.counter, ws.config.budget.cold)
    return result_with_usage(
        ws,
        {
            "learnings": [{"category": lr.category, "date": lr.date, "text": lr.text} for lr in section.learnings],
            "omitted": section.omitted,
            "text": section.text,
        },
    )


async def context_get(call: Call, p: Params) -> Any:
    topic = p.optional_text("topic")
    ranked = await ranked_learnings(call, call.ws, topic)
    everything = p.flag("all")
    recent = await load_recent(call.ws, call.ws.config.warm.recent_days, everything)  # then build_context, no await
    result = build_context(call.ws, topic, everything=everything, ranked=ranked, recent=recent)
    if p.flag("proposals"):  # cold/PROPOSED.md only when asked for, outside every budget
        section = context_section(call.ws.proposals.proposals)
        if section:
            result["text"] = f"{result['text']}\n{section}" if result["text"] else section
        result["proposals"] = len(call.ws.proposals.proposals)
    return result
