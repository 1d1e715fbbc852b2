"""Promote before expire: the candidate learnings of warm days that retention is about to remove. Pure: no I/O.

`extract(day, entries)` finds candidates in one day's entries (docs/format.md, "cold/PROPOSED.md", says which);
`select(candidates, learnings, proposals, limit)` drops what MEMORY.md or PROPOSED.md already holds, marks what
updates a learning as superseding it, and keeps at most `limit` per day. `propose` is both. The LLM backend
(memd.promote_llm) chooses and phrases candidates itself and hands them to `select`, so the same rules hold.

Similarity (documented in docs/format.md): a text's *words* are its lowercased `\\w+` runs minus a short list of
stopwords, each crudely stemmed (a trailing `ing`, `ed`, `es` or `s` dropped from words of five letters or more);
*numbers* are the words holding a digit.
- **duplicate**: the normalized texts are equal (NFKC, case-folded, punctuation dropped, whitespace collapsed);
- **near-duplicate**: Jaccard(words) >= NEAR_DUPLICATE and the numbers are the same;
- **supersedes** a MEMORY.md learning: not a near-duplicate, and either the same category (case-insensitive) with
  overlap(words) >= SAME_SUBJECT_IN_CATEGORY and Jaccard >= MIN_JACCARD_TO_SUPERSEDE, or any category with
  overlap >= SAME_SUBJECT; overlap is |A∩B| / min(|A|, |B|). The candidate is filed under that learning's
  category; a candidate from a day older than the learning's date is stale and dropped instead.
Imports memd.tiers (warm, cold and proposals formats, and the flush's FLUSHED_NOTE).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from memd.tiers.cold_format import Learning
from memd.tiers.flush_identities import FLUSHED_NOTE
from memd.tiers.proposals_format import Proposal, derived_id
from memd.tiers.warm_format import WarmEntry

NEAR_DUPLICATE = 0.8
SAME_SUBJECT = 0.75
SAME_SUBJECT_IN_CATEGORY = 0.6
MIN_JACCARD_TO_SUPERSEDE = 0.4
MAX_TEXT = 400  # characters of a proposed learning; longer ones are cut with "…"
TAG = "#learning"
# The order candidates of one day are kept in when there are more than the cap: what an agent marked first.
KINDS = ("notable", "decision", "fix", "note")
CATEGORY = {"notable": "Learnings", "decision": "Decisions", "fix": "Errors and fixes", "note": "Notes"}

_WORD = re.compile(r"\w+")
_TRUE = {"true", "yes", "1", "on"}
_FAILED = re.compile(
    r"\b(error|errors|fail|failed|fails|failure|failing|exception|traceback|crash|crashed|broken)\b", re.I
)
_FIXED = re.compile(r"\b(fix|fixed|fixes|resolved|resolves|solved|workaround|root cause|the cause was)\b", re.I)
_STOPWORDS = (
    "a an the and or but of to in on at by for with from as is are was were be been it its this that these those "
    "we i you he she they them our my your so not no do does did has have had can will would should into than "
    "then there here when which what who"
)
_STOP = frozenset(_STOPWORDS.split())


@dataclass(frozen=True, slots=True)
class Skipped:
    """A candidate not proposed, and why (for the sweep report)."""

    day: str
    time: str
    action: str
    text: str
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"day": self.day, "time": self.time, "action": self.action, "text": self.text, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class Selection:
    proposed: list[Proposal]
    skipped: list[Skipped]


class Chooser(Protocol):
    """Another way to find a day's candidates (memd.promote_llm). Raises on any failure: the sweep then uses
    `extract`. `ws` is the Workspace (typed loosely: this module sits below memd.workspace)."""

    name: str

    async def choose(self, ws: Any, day: str, entries: Sequence[WarmEntry], limit: int) -> list[Proposal]: ...


# --- text ------------------------------------------------------------------------------------------------------


def normalize(text: str) -> str:
    """Case-folded NFKC text with punctuation dropped and whitespace collapsed: equal means duplicate."""
    return " ".join(_WORD.findall(unicodedata.normalize("NFKC", text).casefold()))


def _stem(word: str) -> str:
    if len(word) >= 5:
        for suffix in ("ing", "ed", "es", "s"):
            if word.endswith(suffix):
                return word[: -len(suffix)]
    return word


def words(text: str) -> frozenset[str]:
    return frozenset(_stem(w) for w in normalize(text).split() if w not in _STOP)


def _numbers(ws: frozenset[str]) -> frozenset[str]:
    return frozenset(w for w in ws if any(c.isdigit() for c in w))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    union = len(a | b)
    return len(a & b) / union if union else 1.0


def overlap(a: frozenset[str], b: frozenset[str]) -> float:
    smaller = min(len(a), len(b))
    return len(a & b) / smaller if smaller else 0.0


def near_duplicate(a: frozenset[str], b: frozenset[str]) -> bool:
    return jaccard(a, b) >= NEAR_DUPLICATE and _numbers(a) == _numbers(b)


def updates(a: frozenset[str], b: frozenset[str], same_category: bool) -> bool:
    """Is a text with words `a` about the same subject as one with words `b` (and not a near-duplicate of it)?"""
    if near_duplicate(a, b):
        return False
    j, o = jaccard(a, b), overlap(a, b)
    return o >= SAME_SUBJECT or (same_category and o >= SAME_SUBJECT_IN_CATEGORY and j >= MIN_JACCARD_TO_SUPERSEDE)


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= MAX_TEXT else flat[: MAX_TEXT - 1].rstrip() + "…"


# --- extraction ------------------------------------------------------------------------------------------------


def _details(entry: WarmEntry) -> dict[str, str]:
    return {k.strip().lower(): v for k, v in entry.details}


def _tagged(entry: WarmEntry) -> bool:
    texts = (entry.action, entry.result or "", *(v for _, v in entry.details))
    return any(TAG in t.lower() for t in texts)


def _untag(text: str) -> str:
    return re.sub(re.escape(TAG) + r"\b", "", text, flags=re.I)


def _said(entry: WarmEntry) -> str:
    """What an entry says in one line: its action, and its result when there is one."""
    action, result = _untag(entry.action).strip(), _untag(entry.result or "").strip()
    return f"{action}: {result}" if result and action else (action or result)


def _candidate(day: str, entry: WarmEntry, kind: str, text: str, category: str) -> Proposal | None:
    text = _one_line(text)
    if not normalize(text):
        return None
    pid = derived_id(day, entry.time, entry.action, normalize(text))
    return Proposal(pid, category, day, text, day, entry.time, entry.action, kind)


def extract(day: str, entries: Sequence[WarmEntry]) -> list[Proposal]:
    """A day's candidates in entry order (the cap and the dedupe are `select`'s):

    - notable: an entry with a `learn` detail of true/yes/1/on, or `#learning` in its action, result or a detail
      value: its `learning` detail, else its action and result (the tag dropped); category: its `category` detail,
      else "Learnings";
    - decision: an entry `decision: <what>` with a `reason` (decision.record, and the checkpoint's flush):
      "<what> (because <reason>)", category "Decisions";
    - fix: an entry with both an `error` and a `fix` detail, or an entry whose action or result says it failed
      followed on the same day by one that says it fixed something and shares a word with it (or comes right
      after it): "<the error>: fixed by <the fix>", category "Errors and fixes";
    - note: a note the checkpoint flushed from hot (`note from hot`, its `text`), category "Notes".
    """
    found: list[Proposal] = []
    used: set[int] = set()
    for index, entry in enumerate(entries):
        details = _details(entry)
        candidate: Proposal | None = None
        if details.get("learn", "").strip().lower() in _TRUE or _tagged(entry):
            text = details.get("learning") or _said(entry)
            candidate = _candidate(
                day, entry, "notable", _untag(text), details.get("category", "").strip() or CATEGORY["notable"]
            )
        elif entry.action.startswith("decision: ") and details.get("reason", "").strip():
            what = entry.action.removeprefix("decision: ").strip()
            candidate = _candidate(
                day, entry, "decision", f"{what} (because {details['reason'].strip()})", CATEGORY["decision"]
            )
        elif details.get("error", "").strip() and details.get("fix", "").strip():
            text = f"{details['error'].strip()}: fixed by {details['fix'].strip()}"
            candidate = _candidate(day, entry, "fix", text, CATEGORY["fix"])
        elif entry.action == FLUSHED_NOTE and details.get("text", "").strip():
            candidate = _candidate(day, entry, "note", details["text"], CATEGORY["note"])
        elif index not in used and _failed(entry):
            fix = _fix_after(entries, index, used)
            if fix is not None:
                used.add(fix)
                text = f"{_said(entry)}: fixed by {_said(entries[fix])}"
                candidate = _candidate(day, entries[fix], "fix", text, CATEGORY["fix"])
        if candidate is not None:
            found.append(candidate)
    return found


def _failed(entry: WarmEntry) -> bool:
    said = f"{entry.action} {entry.result or ''}"
    return _FAILED.search(said) is not None and _FIXED.search(said) is None


def _fix_after(entries: Sequence[WarmEntry], index: int, used: set[int]) -> int | None:
    subject = words(_said(entries[index]))
    for later in range(index + 1, len(entries)):
        entry = entries[later]
        if later in used or entry.action.startswith("decision: "):
            continue
        if _FIXED.search(f"{entry.action} {entry.result or ''}") is None:
            continue
        if later == index + 1 or subject & words(_said(entry)):
            return later
    return None


# --- selection -------------------------------------------------------------------------------------------------


def select(
    candidates: Iterable[Proposal],
    learnings: Sequence[Learning],
    proposals: Sequence[Proposal],
    limit: int,
) -> Selection:
    """The candidates to propose, by day and time, each day capped at `limit` (the KINDS order decides which
    stay), with ids unique in PROPOSED.md; and the ones dropped, with the reason."""
    known = [(normalize(lr.text), words(lr.text), lr) for lr in learnings]
    earlier = [(normalize(p.text), words(p.text), p) for p in proposals]
    taken_ids = {p.id for p in proposals}
    chosen: list[tuple[str, frozenset[str], Proposal]] = []
    skipped: list[Skipped] = []
    per_day: dict[str, int] = {}

    def skip(c: Proposal, reason: str) -> None:
        skipped.append(Skipped(c.day, c.time, c.action, c.text, reason))

    ranked = sorted(candidates, key=lambda c: (c.day, KINDS.index(c.kind) if c.kind in KINDS else len(KINDS)))
    for c in ranked:
        norm, ws = normalize(c.text), words(c.text)
        reason = _duplicate(norm, ws, known, earlier, chosen)
        if reason:
            skip(c, reason)
            continue
        target = _superseded(c, ws, known)
        if target is not None:
            if target.date > c.day:
                skip(c, f"older than the learning it would update: [{target.date}] {target.text}")
                continue
            c = replace(c, category=target.category or c.category, supersedes=(target.date, target.text))
        if per_day.get(c.day, 0) >= limit:
            skip(c, f"over warm.promote_max_per_day ({limit}) for {c.day}")
            continue
        pid, n = c.id, 1
        while pid in taken_ids:
            pid, n = f"{c.id}-{n}", n + 1
        taken_ids.add(pid)
        per_day[c.day] = per_day.get(c.day, 0) + 1
        chosen.append((norm, ws, replace(c, id=pid)))
    proposed = sorted((p for _, _, p in chosen), key=lambda p: (p.day, p.time))  # stable: entry order in a day
    return Selection(proposed, skipped)


def _duplicate(
    norm: str,
    ws: frozenset[str],
    known: Sequence[tuple[str, frozenset[str], Learning]],
    earlier: Sequence[tuple[str, frozenset[str], Proposal]],
    chosen: Sequence[tuple[str, frozenset[str], Proposal]],
) -> str:
    for n, w, lr in known:
        if n == norm:
            return f"already in MEMORY.md: [{lr.date}] {lr.text}"
        if near_duplicate(ws, w):
            return f"near-duplicate of MEMORY.md's [{lr.date}] {lr.text}"
    for n, w, p in (*earlier, *chosen):
        if n == norm:
            return f"already proposed as {p.id}"
        if near_duplicate(ws, w):
            return f"near-duplicate of proposal {p.id}"
    return ""


def _superseded(
    c: Proposal, ws: frozenset[str], known: Sequence[tuple[str, frozenset[str], Learning]]
) -> Learning | None:
    best: tuple[float, Learning] | None = None
    for _, w, lr in known:
        same = lr.category.casefold() == c.category.casefold()
        if updates(ws, w, same):
            score = jaccard(ws, w)
            if best is None or score > best[0]:
                best = (score, lr)
    return best[1] if best is not None else None


def propose(
    days: Sequence[tuple[str, Sequence[WarmEntry]]],
    learnings: Sequence[Learning],
    proposals: Sequence[Proposal],
    limit: int,
) -> Selection:
    """Extract every day's candidates and select among them (the extractive backend, start to end)."""
    candidates = [c for day, entries in days for c in extract(day, entries)]
    return select(candidates, learnings, proposals, limit)


def proposal_json(p: Proposal) -> dict[str, Any]:
    """A proposal as replies show it."""
    return {
        "id": p.id,
        "category": p.category,
        "date": p.date,
        "text": p.text,
        "from": {"day": p.day, "time": p.time, "action": p.action} if p.day else None,
        "kind": p.kind,
        "supersedes": {"date": p.supersedes[0], "text": p.supersedes[1]} if p.supersedes else None,
    }
