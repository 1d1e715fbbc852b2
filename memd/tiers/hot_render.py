"""The hot tier rendered for the context window: the document (memd.tiers.hot_format) as the markdown lines an
agent reads, and their token count made of parts a caller may remember (`count_rendered`). Pure: no I/O.
Imports memd.textfmt and memd.tiers.hot_format.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memd.textfmt import escape_inline, neutralise_line
from memd.tiers.hot_format import HotDoc, object_list, string_list

# Every stored value is rendered through textfmt's one escaping rule, so a value is one line that starts after
# fixed text ("Task: ", "- ", ...): no field can add a line, a heading or an item, whatever line break it holds.

SUMMARY_HEADING = "# Context Summary"  # the heading a checkpoint summary starts with (memd.summarizer)


def _one_line(value: Any) -> str:
    return escape_inline(str(value))


def render_header(doc: HotDoc) -> list[str]:
    """The pinned part: task, step, files, pending actions. Always shown whole."""
    lines = ["# Current Session\n"]
    if doc.get("session_id"):
        lines.append(f"Session: {_one_line(doc['session_id'])}\n")
    lines.append(f"Task: {_one_line(doc.get('task') or '(none)')}\n")
    lines.append(f"Current step: {_one_line(doc.get('current_step') or '(none)')}\n")
    files = string_list(doc, "files_modified")
    if files:
        lines.append("## Files modified\n")
        lines += [f"- {_one_line(f)}\n" for f in files]
    pending = string_list(doc, "pending_actions")
    if pending:
        lines.append("## Pending actions\n")
        lines += [f"- {_one_line(p)}\n" for p in pending]
    return lines


# Escaping works character by character, so escaping a whole line once equals escaping each value in it.


def render_decision(decision: dict[str, Any]) -> str:
    risk = f" (risk: {decision['risk']})" if decision.get("risk") else ""
    line = f"{decision.get('action', '')} — {decision.get('reason', '')}{risk}"
    return f"- {escape_inline(line)}\n"


def render_note(note: dict[str, Any]) -> str:
    ts = note.get("ts")
    line = f"[{ts}] {note.get('text', '')}" if ts else str(note.get("text", ""))
    return f"- {escape_inline(line)}\n"


def render_summary(summary: str) -> list[str]:
    """The summary's lines: its `# Context Summary` heading as it is, every other line neutralised
    (textfmt.neutralise_lines), so a summary can hold bullets and prose but never forge a heading or section."""
    lines = summary.splitlines()  # at every line break textfmt escapes, as neutralise_lines splits
    if lines and lines[0] == SUMMARY_HEADING:
        return [SUMMARY_HEADING + "\n", *(neutralise_line(line) + "\n" for line in lines[1:])]
    return [neutralise_line(line) + "\n" for line in lines]


def render_lines(doc: HotDoc) -> list[str]:
    """The whole hot tier as the agent's context window sees it, as newline-terminated lines."""
    lines = render_header(doc)
    decisions = object_list(doc, "decisions")
    if decisions:
        lines.append(DECISIONS_HEADING)
        lines += [render_decision(d) for d in decisions]
    lines += render_summary(str(doc.get("summary") or ""))
    notes = object_list(doc, "notes")
    if notes:
        lines.append(NOTES_HEADING)
        lines += [render_note(n) for n in notes]
    return lines


DECISIONS_HEADING = "## Decisions\n"
NOTES_HEADING = "## Notes\n"


def count_rendered(
    doc: HotDoc,
    count_line: Callable[[str], int],
    count_summary: Callable[[str], int],
    counted: Callable[[str, list[Any]], list[int]],
) -> int:
    """`sum(map(count_line, render_lines(doc)))`, made of parts the caller may remember: `count_summary(summary)`
    for the summary's lines, `counted("decisions" | "notes", elements)` for each decision's and note's line
    (`count_line(render_decision(d))`, `count_line(render_note(n))`)."""
    total = sum(map(count_line, render_header(doc)))
    decisions = object_list(doc, "decisions")
    if decisions:
        total += count_line(DECISIONS_HEADING) + sum(counted("decisions", decisions))
    total += count_summary(str(doc.get("summary") or ""))
    notes = object_list(doc, "notes")
    if notes:
        total += count_line(NOTES_HEADING) + sum(counted("notes", notes))
    return total
