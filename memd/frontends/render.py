"""Short text for agents: what the MCP tools answer by default and what the hooks inject.

A model reads this text, so it is short, one fact per line, and every stored value goes through textfmt's
escaping rule (one line each: no value can forge a line or a heading). `resume_text` fits the resume packet into a
host's limit, most useful first (task and step, pending actions, decisions, notes, learnings, then activity),
cutting whole lines. Imports memd.textfmt only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from memd.textfmt import escape_inline

TRIMMED = "… ({n} more lines left out to stay within {limit:,} characters; the memd MCP tools show the rest)"


def _v(value: Any) -> str:
    return escape_inline(str(value))


def usage_line(usage: Any) -> str:
    if not isinstance(usage, dict):
        return ""
    parts = [f"{tier} {u.get('percent', 0)}%" for tier, u in usage.items() if isinstance(u, dict)]
    return f"(memory used: {', '.join(parts)})" if parts else ""


def fit(lines: Iterable[str], limit: int | None) -> str:
    """`lines` joined, cut after the last whole line that fits in `limit` characters with the note saying so."""
    lines = list(lines)
    text = "\n".join(lines)
    if limit is None or len(text) <= limit:
        return text
    kept: list[str] = []
    size = 0
    for i, line in enumerate(lines):
        note = TRIMMED.format(n=len(lines) - i, limit=limit)
        if size + len(line) + 1 + len(note) > limit:
            return "\n".join([*kept, note])[:limit]
        kept.append(line)
        size += len(line) + 1
    return text[:limit]  # unreachable: the loop returns once the text is over the limit


def resume_lines(packet: dict[str, Any], workspace: str) -> list[str]:
    resumed = "resumed" if packet.get("resumed") else "new"
    lines = [f"# memd: memory of workspace {_v(workspace)} (session {_v(packet.get('session_id', ''))}, {resumed})"]
    lines.append(f"Task: {_v(packet.get('task') or '(none set)')}")
    if packet.get("current_step"):
        lines.append(f"Current step: {_v(packet['current_step'])}")
    previous = packet.get("previous")
    if isinstance(previous, dict) and previous.get("task"):
        lines.append(
            f"Previous task (replaced): {_v(previous['task'])}; its step: {_v(previous.get('current_step', ''))}"
        )
    for title, key in (("Pending actions", "pending_actions"), ("Files modified", "files_modified")):
        items = packet.get(key) or []
        if items:
            lines.append(f"{title}:")
            lines += [f"- {_v(item)}" for item in items]
    decisions = packet.get("recent_decisions") or []
    if decisions:
        lines.append("Recent decisions:")
        for d in decisions:
            risk = f" (risk: {_v(d['risk'])})" if d.get("risk") else ""
            lines.append(f"- {_v(d.get('action', ''))}: {_v(d.get('reason', ''))}{risk}")
    notes = packet.get("recent_notes") or []
    if notes:
        lines.append("Notes:")
        lines += [f"- {_v(n.get('text', ''))}" for n in notes]
    learnings = packet.get("relevant_learnings") or []
    if learnings:
        lines.append("Relevant learnings:")
        lines += [f"- [{_v(lr.get('category', ''))}] {_v(lr.get('text', ''))}" for lr in learnings]
    activity = packet.get("recent_activity") or []
    if activity:
        lines.append("Recent activity (newest first):")
        lines += [_entry(e) for e in activity]
    return lines


def resume_text(packet: dict[str, Any], workspace: str, limit: int | None = None) -> str:
    return fit(resume_lines(packet, workspace), limit)


def _entry(e: dict[str, Any]) -> str:
    result = f" -> {_v(e['result'])}" if e.get("result") else ""
    return f"- {e.get('date', '')} {e.get('time', '')} {_v(e.get('action', ''))}{result}"


def _progress(r: dict[str, Any]) -> str:
    lines = [f"Current step: {_v(r.get('current_step') or '(none)')}"]
    pending = r.get("pending_actions") or []
    lines.append("Pending actions: " + ("; ".join(_v(a) for a in pending) if pending else "none"))
    if r.get("not_pending"):
        lines.append("Not pending, so not marked done: " + "; ".join(_v(a) for a in r["not_pending"]))
    return "\n".join(lines)


def _status(r: dict[str, Any]) -> str:
    lines = [f"memd {r.get('version', '?')}, up {float(r.get('uptime_seconds', 0)):.0f}s"]
    for name, ws in (r.get("workspaces") or {}).items():
        line = f"{_v(name)}: {usage_line(ws.get('usage'))}"
        if ws.get("write_fault"):
            line += f"; last write failed: {_v(ws.get('last_write_error', ''))}"
        for tier, err in (ws.get("file_errors") or {}).items():
            line += f"; {tier} file unreadable: {_v(err)}"
        checkpoint = ws.get("checkpoint") or {}
        if checkpoint.get("last_error"):
            line += f"; checkpoint failing: {_v(checkpoint['last_error'])}"
        lines.append(line)
    return "\n".join(lines)


def _learnings(r: dict[str, Any]) -> str:
    lines = [f"- [{_v(lr['category'])}] {_v(lr['text'])} ({lr.get('date', '')})" for lr in r.get("learnings") or []]
    if r.get("omitted"):
        lines.append(f"({r['omitted']} more left out to stay within the cold budget)")
    return "\n".join(lines) or "(no relevant learnings)"


SHORT: dict[str, Callable[[dict[str, Any]], str]] = {
    "progress.update": _progress,
    "decision.record": lambda r: (
        f"Recorded decision: {_v(r['decision'].get('action', ''))} {usage_line(r.get('usage'))}"
    ),
    "hot.note": lambda r: f"Noted. {usage_line(r.get('usage'))}",
    "warm.log": lambda r: (
        f"Logged {_v(r['entry'].get('action', ''))!r} at {r['entry'].get('date', '')} {r['entry'].get('time', '')}. "
        f"{usage_line(r.get('usage'))}"
    ),
    "cold.learn": lambda r: f"Learned [{_v(r['learning']['category'])}] {_v(r['learning']['text'])}",
    "warm.recent": lambda r: (
        "\n".join(_entry(e) for day in r.get("days") or [] for e in reversed(day["entries"])) or "(no recent activity)"
    ),
    "cold.get": _learnings,
    "status": _status,
    "history.list": lambda r: (
        "\n".join(
            f"{c['rev'][:12]}  {c.get('time', '')}  {_v(c.get('reason') or c.get('subject') or '')}"
            for c in r["commits"]
        )
        or "(no snapshots yet)"
    ),
    "checkpoint.list": lambda r: (
        "\n".join(
            f"{c.get('id')}  {c.get('at', '')}  hot {c.get('tokens_before')} -> {c.get('tokens_after')} tokens"
            for c in r.get("checkpoints") or []
        )
        or "(no checkpoints)"
    ),
    "checkpoint.undo": lambda r: (
        f"Checkpoint {r['undone'].get('id')} undone: {r['undone'].get('restored_entries')} notes and decisions are "
        "back in the working context."
    ),
    "snapshot.restore": lambda r: (
        f"Restored {', '.join(_v(p) for p in r.get('changed') or []) or 'nothing (no file differed)'} to "
        f"{str(r.get('rev', ''))[:12]}; the state before is snapshot {str(r.get('before') or '')[:12]}."
    ),
}


def short(method: str, result: Any, workspace: str = "") -> str:
    """The short text of `method`'s result (compact JSON where there is no short form)."""
    if method == "session.start" and isinstance(result, dict):
        return resume_text(result, workspace)
    render = SHORT.get(method)
    if render is not None and isinstance(result, dict):
        try:
            return render(result)
        except (KeyError, TypeError, AttributeError):
            pass  # a shape this version does not know (a newer daemon): the JSON says it all
    return json.dumps(result, ensure_ascii=False, separators=(",", ":"))
