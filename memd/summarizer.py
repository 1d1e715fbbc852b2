"""Summarizers: turn the hot tier's older entries into one `# Context Summary`. The interface and the offline one.

`Summarizer` is the small interface the checkpointer depends on; `ExtractiveSummarizer` (the default) is
deterministic and offline, so a fresh install with no API key still keeps hot context within budget. The
OpenAI-compatible adapter lives in memd.llm. Imports only memd.tokens.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from memd.tokens import TokenCounter

SUMMARY_HEADING = "# Context Summary"


@dataclass(frozen=True)
class Entry:
    """One compressible piece of hot context: an older note, an older decision, or the previous summary."""

    key: str
    kind: str  # "note" | "decision" | "summary"
    text: str
    ts: str = ""


class SpendMeter:
    """LLM tokens a summary cost, attempt by attempt, filled in by the summarizer as it goes, so that a failed or
    timed-out call is counted against the daily cap too (read by the checkpointer whatever happened)."""

    def __init__(self) -> None:
        self.tokens = 0
        self.attempts = 0

    def add(self, tokens: int) -> None:
        self.tokens += max(0, tokens)


@dataclass(frozen=True)
class SummaryRequest:
    entries: Sequence[Entry]
    max_tokens: int  # the summary's allotment: it must fit, or the checkpoint is refused
    task: str = ""  # context for the summarizer only; never compressed, never changed
    meter: SpendMeter = field(default_factory=SpendMeter)


@dataclass(frozen=True)
class SummaryResult:
    text: str
    backend: str
    model: str = ""
    tokens_in: int = 0
    tokens_out: int = 0
    request_ids: list[str] = field(default_factory=list)
    redactions: dict[str, int] = field(default_factory=dict)
    finish_reason: str = "stop"  # an LLM reply cut off at its token limit says "length" and is never applied


class Summarizer(Protocol):
    name: str

    async def summarize(self, request: SummaryRequest) -> SummaryResult: ...


# --- the extractive summarizer --------------------------------------------------------------------------------
# What an agent needs back from old notes is rarely the prose: it is the identifiers, numbers, paths, error
# messages and the decisions with their reasons. Sentences are kept whole (a cut sentence loses its subject or
# its number), the ones carrying such facts first, in time order; when the allotment is tight, bullets with the
# fewest facts yield first. Everything dropped is in the warm log (the checkpoint flushes it there) and in git.

_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+(?=\S)|\n+")
FACT_TOKEN = re.compile(
    r"""
    [A-Za-z0-9_.~-]*/[A-Za-z0-9_./~-]+              # paths and URLs' paths: src/parse.py, /etc/memd, a/b
    | [A-Za-z_][A-Za-z0-9]*(?:(?:[._-]|::?)[A-Za-z0-9]+)+  # dotted, snake, kebab, colon names: lru.get, ERR_X, a::b
    | [a-z]+[A-Z][A-Za-z0-9]*                        # camelCase
    | \b[A-Z][A-Z0-9]+\b                              # CONSTANTS and codes: EADDRINUSE, HTTP, E501
    | \d+(?:[.,:]\d+)*(?:\s?(?i:ms|s|kb|mb|gb|kib|mib|gib|%|x|k|tokens?|bytes?|req/s|/s)\b)?  # numbers, units
    """,
    re.VERBOSE,
)
_ERRORISH = re.compile(
    r"\b(error|errors|failed|fails|failure|exception|traceback|panic|timeout|refused|denied)\b", re.IGNORECASE
)
_FILLER = re.compile(r"^(ok|okay|done|noted|thanks|fine|good|great|sure)[.!]?$", re.IGNORECASE)


_CAMEL = re.compile(r"[a-z][A-Z]")
# FACT_TOKEN backtracks over a run of word characters from every position in it (a path's `[...]*/` looks for the
# slash), so a run of n characters costs n^2: 20,000 `x`s took 9 s of the event loop, the fuzz suite's 300,000
# took the daemon away for minutes. No fact is that long; such runs are left out of scoring and fact checks.
MAX_FACT_CHARS = 200
_LONG_RUN = re.compile(rf"\S{{{MAX_FACT_CHARS + 1},}}")


def _without_long_runs(text: str) -> str:
    return _LONG_RUN.sub(" ", text) if len(text) > MAX_FACT_CHARS else text


_STAMP = re.compile(r"\[\d{4}-\d\d-\d\d(?:T[\d:]+)?\]|\b\d{4}-\d\d-\d\dT\d\d:\d\d(?::\d\d)?(?:[+-]\d\d:\d\d|Z)?")


def fact_tokens(text: str) -> set[str]:
    """The identifiers, paths and numbers in `text` (lower-cased): what a summary must keep to be worth applying.
    A lone digit is not a fact; a number with two digits or a unit is. memd's own timestamps and hyphenated plain
    words (case-sensitive, follow-up) are not facts, nor is a run of over MAX_FACT_CHARS characters without a space."""
    found = set()
    for m in FACT_TOKEN.finditer(_STAMP.sub(" ", _without_long_runs(text))):
        token = m.group(0).strip(".,:;-").lower()
        if len(token) >= 2 and not token.replace("-", "").isalpha():
            found.add(token)
        elif len(token) >= 2 and (m.group(0).isupper() or _CAMEL.search(m.group(0))):
            found.add(token)  # CONSTANTS and codes (EADDRINUSE, HTTP), camelCase names
    return found


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip() and not _FILLER.match(s.strip())]


def _score(sentence: str) -> int:
    return len(FACT_TOKEN.findall(_without_long_runs(sentence))) + (2 if _ERRORISH.search(sentence) else 0)


# The bullets a summary carries are scored again at every checkpoint after it (a summary under a checkpoint every
# few hundred hot writes carries ~100): remembered, at most this many (a summary holds far fewer).
CARRIED_SCORES_KEPT = 1024
_carried_score = functools.lru_cache(maxsize=CARRIED_SCORES_KEPT)(_score)


@dataclass
class _Bullet:
    order: int
    full: str  # every sentence that carries a fact (and the first one)
    short: str  # the first sentence, or the one with most facts when the first has none
    score: int


class ExtractiveSummarizer:
    """Whole sentences that carry facts, one bullet per entry, decisions and notes alike, in time order; the bullets
    of earlier summaries are carried first and compete for room by the facts they hold like the new ones."""

    name = "extractive"

    def __init__(self, counter: TokenCounter) -> None:
        self._counter = counter

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        header = f"{SUMMARY_HEADING}\n"
        bullets = self._bullets(request.entries)
        room = request.max_tokens - self._counter.count_piece(header) - self._counter.count_piece(_OMITTED % 999)
        chosen = self._fit(bullets, room)
        lines = [b for b in chosen if b]
        omitted = sum(1 for b in chosen if not b)
        if omitted:
            lines.append(_OMITTED % omitted)
        return SummaryResult(text=header + "".join(lines), backend=self.name)

    def _bullets(self, entries: Sequence[Entry]) -> list[_Bullet]:
        out: list[_Bullet] = []
        previous = [e for e in entries if e.kind == "summary"]
        for e in previous:
            for line in e.text.splitlines():
                body = line[2:].strip() if line.startswith("- ") else ""
                if body and not body.startswith("("):
                    out.append(_Bullet(len(out), f"- {body}\n", f"- {body}\n", _carried_score(body)))
        others = sorted((e for e in entries if e.kind != "summary"), key=lambda e: e.ts)  # stable: ts, then order
        for e in others:
            parts = sentences(e.text)
            if not parts:
                continue
            stamp = f"[{e.ts[:16]}] " if e.ts else ""
            prefix = f"- {stamp}{'Decided: ' if e.kind == 'decision' else ''}"
            scores = [_score(s) for s in parts]  # once each: the regexes are most of a checkpoint's own time
            kept = [i for i, score in enumerate(scores) if i == 0 or score > 0]
            best = 0 if scores[0] > 0 or len(parts) == 1 else max(range(len(parts)), key=scores.__getitem__)
            out.append(
                _Bullet(
                    len(out),
                    f"{prefix}{' '.join(parts[i] for i in kept)}\n",
                    f"{prefix}{parts[best]}\n",
                    sum(scores[i] for i in kept),
                )
            )
        return out

    def _fit(self, bullets: list[_Bullet], room: int) -> list[str]:
        """Full bullets if they fit; else the short form, fewest-facts (then oldest) first; else drop bullets the
        same way. Returns one line per bullet in time order, "" for a dropped one."""
        text = {b.order: b.full for b in bullets}
        cost = {b.order: self._counter.count_piece(b.full) for b in bullets}
        total = sum(cost.values())
        yield_order = sorted(bullets, key=lambda b: (b.score, b.order))
        for b in yield_order:
            if total <= room:
                break
            if b.short != b.full:
                short_cost = self._counter.count_piece(b.short)
                total += short_cost - cost[b.order]
                text[b.order], cost[b.order] = b.short, short_cost
        for b in yield_order:
            if total <= room:
                break
            total -= cost[b.order]
            text[b.order], cost[b.order] = "", 0
        return [text[b.order] for b in bullets]


_OMITTED = "- (%d older entries without room here: in the warm log and git)\n"
