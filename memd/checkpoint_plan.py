"""What a checkpoint compresses, and whether a summary may replace it.

Pure planning over one hot document: which entries are old enough to compress (everything but the pinned parts),
how many tokens the summary may take so that hot ends at `checkpoint_target`, which parts must stay
byte-identical, and the checks a summary must pass before it is applied. Entries are known by key (`id`, or a
content hash for entries other tools wrote). The sequencing (git, summarizer, writer) is memd/checkpoint.py.
Imports memd.workspace (types and token counts), memd.summarizer, the hot format and its rendering
(memd.tiers.hot_render), memd.config and memd.errors.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from memd.config import CheckpointConfig
from memd.errors import CheckpointFailed
from memd.redact import redact
from memd.summarizer import SUMMARY_HEADING, Entry, SummaryResult, fact_tokens
from memd.tiers import hot_render
from memd.tiers.hot_format import HotDoc
from memd.workspace import Workspace

NOTHING_TO_COMPRESS = "nothing_to_compress"  # CheckpointFailed.data["reason"]: no work, not a failure
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
    fold_reserve: int = 0  # tokens of memd's fold line, kept out of the summarizer's share of the allotment

    @property
    def summary_allotment(self) -> int:
        return self.allotment - self.fold_reserve


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


def pinned(
    doc: HotDoc, keep_decisions: int, kept_notes: list[str], notes_keyed: list[tuple[str, dict[str, Any]]] | None = None
) -> dict[str, Any]:
    """The parts a checkpoint must leave byte-identical. `notes_keyed`: the notes with the keys they had before
    some were removed; keying the remaining ones afresh would renumber a twin (`sha256:…#1` becomes `sha256:…`
    once the older copy is compressed) and make a pinned note look gone."""
    decisions = list(doc.get("decisions") or [])
    notes = dict(keyed(list(doc.get("notes") or [])) if notes_keyed is None else notes_keyed)
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
        cost = counter.count_piece(hot_render.render_note(note))
        if used + cost > recent_room:
            break
        kept.insert(0, note)
        used += cost
    target = budget.checkpoint_target * budget.hot

    def fixed_tokens(kept_notes: list[dict[str, Any]]) -> int:
        skeleton = {**doc, "notes": kept_notes, "decisions": decisions[len(decisions) - keep_d :], "summary": ""}
        return ws.hot.count(skeleton) + counter.count_piece("## Notes\n")

    summary_before = str(doc.get("summary") or "")
    reserve = counter.count_piece(fold_line(summary_before, len(notes) + len(decisions), "0" * 12))
    allotment = int(target - fixed_tokens(kept))
    while allotment - reserve < MIN_ALLOTMENT and kept:
        kept.pop(0)  # the recent window yields before the target is missed
        allotment = int(target - fixed_tokens(kept))
    if allotment - reserve < MIN_ALLOTMENT:
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
    if summary_before:
        entries.insert(0, Entry("summary", "summary", without_fold_line(summary_before)))
    if not entries:
        raise CheckpointFailed(
            f"nothing in {ws.name!r} is old enough to compress (only pinned context)",
            data={"reason": NOTHING_TO_COMPRESS},
        )
    return Plan(
        entries=entries,
        summary_before=summary_before,
        allotment=allotment,
        tokens_before=ws.hot.count(doc),
        keep_decisions=keep_d,
        kept_notes=kept_keys,
        fold_reserve=reserve,
    )


SECTIONS = ("## Decisions", "## Facts and identifiers", "## Errors and fixes", "## Open questions")
_FOLD = re.compile(r"^- \(folds in (\d+) entries from (\d+) checkpoints?; pre-state ([^)]*)\)[ \t]*\n?", re.M)


def verify_summary(
    ws: Workspace, plan: Plan, result: SummaryResult, min_coverage: float = 0.0, structured: bool = False
) -> str:
    """The summary as it will be written (without the fold line), or CheckpointFailed: cut off, empty, a refusal,
    over its allotment, and for an LLM's (`structured`) one that breaks the asked-for structure or keeps fewer
    than `min_coverage` of the identifiers, paths and numbers it was given."""
    if result.finish_reason not in ("stop", ""):
        raise CheckpointFailed(
            f"the summary was cut off (finish_reason {result.finish_reason!r}: it hit its token limit); nothing applied"
        )
    text = result.text.strip()
    if not text or text == SUMMARY_HEADING:
        raise CheckpointFailed("the summarizer returned an empty summary; nothing applied")
    body = text.removeprefix(SUMMARY_HEADING).strip()
    if not body or _REFUSAL.match(body):
        raise CheckpointFailed(f"the summarizer returned an error or refusal instead of a summary: {body[:120]!r}")
    if structured:
        _check_structure(body)
        _check_coverage(plan, body, min_coverage)
    text = f"{SUMMARY_HEADING}\n{body}\n"
    tokens = ws.counter.count(text)
    if tokens > plan.summary_allotment:
        raise CheckpointFailed(
            f"the summary has {tokens} tokens, over its allotment of {plan.summary_allotment} (the checkpoint "
            "target); nothing applied"
        )
    return text


def _check_structure(body: str) -> None:
    for n, line in enumerate(body.splitlines(), 1):
        if not line.strip() or line in SECTIONS or line.startswith("- ") or line.startswith("  "):
            continue
        raise CheckpointFailed(
            f"the summary breaks the asked-for structure at line {n} ({line[:80]!r}): only the headings "
            f"{', '.join(SECTIONS)} and '- ' bullets are accepted; nothing applied"
        )


def _check_coverage(plan: Plan, body: str, min_coverage: float) -> None:
    # A secret is scrubbed before it is sent: it is no fact the summary could have kept.
    facts = set().union(*(fact_tokens(redact(e.text).text) for e in plan.entries)) if plan.entries else set()
    facts = {f for f in facts if not _FOLD_WORDS.match(f)}
    if len(facts) < 3:
        return
    kept_text = body.lower()
    kept = sum(1 for f in facts if f in kept_text)
    share = kept / len(facts)
    if share < min_coverage:
        missing = sorted(f for f in facts if f not in kept_text)[:8]
        raise CheckpointFailed(
            f"the summary keeps {kept} of {len(facts)} identifiers, paths and numbers of what it compresses "
            f"({share:.0%}, checkpoint.min_fact_coverage is {min_coverage:.0%}; missing e.g. {', '.join(missing)}); "
            "nothing applied"
        )


_FOLD_WORDS = re.compile(r"^[0-9a-f]{7,40}$")  # commit ids in the fold line are memd's, not facts to keep


def fold_line(summary_before: str, compressed: int, pre_commit: str) -> str:
    """memd's own last line of a summary: how many entries all checkpoints so far folded in (exact, carried from
    the previous summary) and the newest pre-state commit, which holds them verbatim (each checkpoint record names
    its own, `memd checkpoints WS`)."""
    entries, checkpoints = compressed, 1
    match = _FOLD.search(summary_before)
    if match:
        entries += int(match.group(1))
        checkpoints += int(match.group(2))
    where = pre_commit[:12] if pre_commit else "none, snapshots disabled"
    plural = "s" if checkpoints > 1 else ""
    return f"- (folds in {entries} entries from {checkpoints} checkpoint{plural}; pre-state {where})\n"


def without_fold_line(summary: str) -> str:
    return _FOLD.sub("", summary)


def _decision_text(decision: dict[str, Any]) -> str:
    risk = f" (risk: {decision['risk']})" if decision.get("risk") else ""
    return f"{decision.get('action', '')} — {decision.get('reason', '')}{risk}"
