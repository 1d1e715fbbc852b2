"""One checkpoint as it was decided, between summarizing and applying: its summary, exactly which entries the
summary covers, and how it rewrites a hot document (entries edited meanwhile stay, with their new text). Pure:
what both of a checkpoint's writer batches need, fixed before either runs (the sequencing is memd/checkpoint.py).
Imports memd.checkpoint_plan, memd.summarizer and the hot format.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memd.checkpoint_plan import Plan, fold_line, keyed
from memd.summarizer import SummaryResult
from memd.tiers.hot_format import HotDoc

_FIELD = {"note": "notes", "decision": "decisions"}


@dataclass(frozen=True)
class Summary:
    text: str  # without a fold line, ending in one newline: memd appends its own
    result: SummaryResult  # of the summarizer whose text this is (the fallback's after a rejection)
    rejection: str = ""  # why the LLM's summary was refused, when the fallback's is applied instead


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint between summarizing and applying: what both writer batches need, fixed before either runs."""

    id: str
    plan: Plan
    pre_commit: str
    summary: Summary
    summarized: dict[tuple[str, str], dict[str, Any]]  # (list, key) -> the entry exactly as the summary covers it
    flush: bool

    def compressed(self, field: str, key: str, entry: dict[str, Any]) -> bool:
        return self.summarized.get((field, key)) == entry

    def to_remove(self, doc: HotDoc) -> list[tuple[str, dict[str, Any], str]]:
        decisions, notes = keyed(list(doc.get("decisions") or [])), keyed(list(doc.get("notes") or []))
        return [(k, e, "decision") for k, e in decisions if self.compressed("decisions", k, e)] + [
            (k, e, "note") for k, e in notes if self.compressed("notes", k, e)
        ]

    def compact(
        self, doc: HotDoc
    ) -> tuple[HotDoc, list[tuple[str, dict[str, Any]]], list[tuple[str, dict[str, Any], str]], list[str]]:
        """`doc` with the compressed entries replaced by the summary; also the notes left (with their keys), the
        entries removed and the keys of summarized entries kept because they were edited meanwhile."""
        new = dict(doc)
        notes, decisions = keyed(list(doc.get("notes") or [])), keyed(list(doc.get("decisions") or []))
        notes_left = [(k, n) for k, n in notes if not self.compressed("notes", k, n)]
        new["notes"] = [n for _, n in notes_left]
        new["decisions"] = [d for k, d in decisions if not self.compressed("decisions", k, d)]
        removed = self.to_remove(doc)
        edited = sorted(
            k
            for field, entries in (("notes", notes), ("decisions", decisions))
            for k, e in entries
            if (field, k) in self.summarized and not self.compressed(field, k, e)
        )
        new["summary"] = self.summary.text + fold_line(self.plan.summary_before, len(removed), self.pre_commit)
        return new, notes_left, removed, edited


def summarized(plan: Plan, planned_doc: HotDoc) -> dict[tuple[str, str], dict[str, Any]]:
    # Keys per list: a tool that numbers its notes and decisions alike ("id": "4" in both) must not make a
    # compressed note remove a pinned decision.
    keys = {(_FIELD[e.kind], e.key) for e in plan.entries if e.kind != "summary"}
    # What was summarized, exactly: an entry edited while the summarizer ran (same id, new text) is not what
    # the summary covers, so it stays in hot with its new text instead of being removed by its key.
    return {
        (field, k): entry
        for field in ("notes", "decisions")
        for k, entry in keyed(list(planned_doc.get(field) or []))
        if (field, k) in keys
    }
