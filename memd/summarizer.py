"""Summarizers: turn the hot tier's older entries into one `# Context Summary`. The interface and the offline one.

`Summarizer` is the small interface the checkpointer depends on; `ExtractiveSummarizer` (the default) is
deterministic and offline, so a fresh install with no API key still keeps hot context within budget. The
OpenAI-compatible adapter lives in memd.llm. Imports only memd.tokens.
"""

from __future__ import annotations

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


@dataclass(frozen=True)
class SummaryRequest:
    entries: Sequence[Entry]
    max_tokens: int  # the summary's allotment: it must fit, or the checkpoint is refused
    task: str = ""  # context for the summarizer only; never compressed, never changed


@dataclass(frozen=True)
class SummaryResult:
    text: str
    backend: str
    model: str = ""
    tokens_in: int = 0
    tokens_out: int = 0
    request_ids: list[str] = field(default_factory=list)
    redactions: dict[str, int] = field(default_factory=dict)


class Summarizer(Protocol):
    name: str

    async def summarize(self, request: SummaryRequest) -> SummaryResult: ...


def _first_line(text: str, limit: int = 160) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


class ExtractiveSummarizer:
    """Keeps the first line of each entry as a bullet, newest entries first when the allotment is tight."""

    name = "extractive"

    def __init__(self, counter: TokenCounter) -> None:
        self._counter = counter

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        header = [f"{SUMMARY_HEADING}\n", "_(extractive: first lines of older context; originals in git history)_\n"]
        omission_cost = self._counter.count_piece("- (999 older entries omitted)\n")
        if self._counter.count_lines(header) + omission_cost > request.max_tokens:
            header = [f"{SUMMARY_HEADING}\n", "_(extractive)_\n"]  # a tight allotment: the short label
        used = self._counter.count_lines(header)
        bullets: list[str] = []
        previous = [e for e in request.entries if e.kind == "summary"]
        others = [e for e in request.entries if e.kind != "summary"]
        carried = [
            ln + "\n"
            for e in previous
            for ln in e.text.splitlines()
            if ln.startswith("- ") and not ln.startswith("- (")
        ]
        candidates = carried + [self._bullet(e) for e in others]
        omitted = 0
        room = request.max_tokens - omission_cost
        for bullet in reversed(candidates):  # newest first wins the room
            cost = self._counter.count_piece(bullet)
            if used + cost > room:
                omitted += 1
                continue
            used += cost
            bullets.append(bullet)
        bullets.reverse()
        if omitted:
            bullets.append(f"- ({omitted} older entries omitted)\n")
        return SummaryResult(text="".join(header + bullets), backend=self.name)

    @staticmethod
    def _bullet(entry: Entry) -> str:
        if entry.kind == "decision":
            return f"- Decided: {_first_line(entry.text)}\n"
        stamp = f"[{entry.ts[:16]}] " if entry.ts else ""
        return f"- {stamp}{_first_line(entry.text)}\n"
