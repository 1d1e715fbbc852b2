"""What a checkpoint compresses, and whether a summary may replace it.

Pure planning over one hot document: which entries are old enough to compress (everything but the pinned parts),
how many tokens the summary may take so that hot ends at `checkpoint_target`, which parts must stay
byte-identical, and the checks a summary must pass before it is applied. Entries are known by key (`id`, or a
content hash for entries other tools wrote). The sequencing (git, summarizer, writer) is memd/checkpoint.py.
Imports memd.workspace (types and token counts), memd.summarizer, the hot format, memd.config and memd.errors.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from memd.config import CheckpointConfig
from memd.errors import CheckpointFailed
from memd.summarizer import SUMMARY_HEADING, Entry, SummaryResult
from memd.tiers import hot_format
from memd.tiers.hot_format import HotDoc
from memd.workspace import Workspace

MIN_ALLOTMENT = 40  # below this no summary is worth writing (the extractive one needs ~12 for its frame)
_REFUSAL = re.compile(
    r"^\s*(i'?m sorry|i am sorry|i can(?:'|no)t|as an ai\b|error\b|sorry,|i apologi[sz]e|unable to)", re.I
)


@dataclass(frozen=True)
class Plan:
    entries: list[Entry]
    summary_before: str
    allotment: int
    tokens_before: int
    keep_decisions: int
    kept_notes: list[str]


def entry_key(entry: dict[str, Any]) -> str:
    """Entries written by memd have ids; ones from other tools are known by a hash of their content."""
    if entry.get("id"):
        return str(entry["id"])
    return "sha256:" + hashlib.sha256(json.dumps(entry, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]


def keyed(entries: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """Each entry with a key unique in the list: identical id-less entries (two recipe decisions with the same
    text) are told apart by their occurrence, so compressing one never removes its twin."""
    seen: dict[str, int] = {}
    out = []
    for entry in entries:
        key = entry_key(entry)
        n = seen.get(key, 0)
        seen[key] = n + 1
        out.append((f"{key}#{n}" if n and not entry.get("id") else key, entry))
    return out


def pinned(doc: HotDoc, keep_decisions: int, kept_notes: list[str]) -> dict[str, Any]:
    """The parts a checkpoint must leave byte-identical."""
    decisions = list(doc.get("decisions") or [])
    notes = dict(keyed(list(doc.get("notes") or [])))
    return {
        "task": doc.get("task"),
        "current_step": doc.get("current_step"),
        "pending_actions": doc.get("pending_actions"),
        "files_modified": doc.get("files_modified"),
        "decisions": json.dumps(decisions[-keep_decisions:] if keep_decisions else [], sort_keys=True),
        "notes": json.dumps([notes.get(k) for k in kept_notes], sort_keys=True),
    }


def plan_checkpoint(config: CheckpointConfig, ws: Workspace, doc: HotDoc) -> Plan:
    """What to compress and how many tokens the summary may take so that hot ends at the target."""
    budget = ws.config.budget
    counter = ws.counter
    notes = list(doc.get("notes") or [])
    decisions = list(doc.get("decisions") or [])
    keep_d = min(config.keep_decisions, len(decisions))
    old_decisions = decisions[: len(decisions) - keep_d]
    recent_room = config.recent_share * budget.hot
    kept: list[dict[str, Any]] = []
    used = 0
    for note in reversed(notes):
        cost = counter.count_piece(hot_format.render_note(note))
        if used + cost > recent_room:
            break
        kept.insert(0, note)
        used += cost
    target = budget.checkpoint_target * budget.hot

    def fixed_tokens(kept_notes: list[dict[str, Any]]) -> int:
        skeleton = {**doc, "notes": kept_notes, "decisions": decisions[len(decisions) - keep_d :], "summary": ""}
        return ws.hot.count(skeleton) + counter.count_piece("## Notes\n")

    allotment = int(target - fixed_tokens(kept))
    while allotment < MIN_ALLOTMENT and kept:
        kept.pop(0)  # the recent window yields before the target is missed
        allotment = int(target - fixed_tokens(kept))
    if allotment < MIN_ALLOTMENT:
        raise CheckpointFailed(
            f"the pinned parts of {ws.name!r} (task, step, pending actions, files, last {keep_d} decisions) "
            f"alone exceed the checkpoint target of {int(target)} tokens; raise budget.hot or trim them"
        )
    note_keys = {id(n): k for k, n in keyed(notes)}
    decision_keys = {id(d): k for k, d in keyed(decisions)}
    kept_keys = [note_keys[id(n)] for n in kept]
    entries = [
        Entry(decision_keys[id(d)], "decision", _decision_text(d), str(d.get("ts") or "")) for d in old_decisions
    ]
    entries += [
        Entry(note_keys[id(n)], "note", str(n.get("text") or ""), str(n.get("ts") or ""))
        for n in notes
        if note_keys[id(n)] not in kept_keys
    ]
    summary_before = str(doc.get("summary") or "")
    if summary_before:
        entries.insert(0, Entry("summary", "summary", summary_before))
    if not entries:
        raise CheckpointFailed(f"nothing in {ws.name!r} is old enough to compress (only pinned context)")
    return Plan(
        entries=entries,
        summary_before=summary_before,
        allotment=allotment,
        tokens_before=ws.hot.count(doc),
        keep_decisions=keep_d,
        kept_notes=kept_keys,
    )


def verify_summary(ws: Workspace, plan: Plan, result: SummaryResult) -> str:
    """The summary as it will be written, or CheckpointFailed: empty, a refusal, or over its allotment."""
    text = result.text.strip()
    if not text or text == SUMMARY_HEADING:
        raise CheckpointFailed("the summarizer returned an empty summary; nothing applied")
    body = text.removeprefix(SUMMARY_HEADING).strip()
    if not body or _REFUSAL.match(body):
        raise CheckpointFailed(f"the summarizer returned an error or refusal instead of a summary: {body[:120]!r}")
    if not text.startswith(SUMMARY_HEADING):
        text = f"{SUMMARY_HEADING}\n{text}"
    text += "\n"
    tokens = ws.counter.count(text)
    if tokens > plan.allotment:
        raise CheckpointFailed(
            f"the summary has {tokens} tokens, over its allotment of {plan.allotment} (the checkpoint target); "
            "nothing applied"
        )
    return text


def _decision_text(decision: dict[str, Any]) -> str:
    risk = f" (risk: {decision['risk']})" if decision.get("risk") else ""
    return f"{decision.get('action', '')} — {decision.get('reason', '')}{risk}"
