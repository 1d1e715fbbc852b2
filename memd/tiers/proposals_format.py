"""The proposals file of the cold tier: parse, insert into and remove from `cold/PROPOSED.md`. Pure: no I/O.

    # Proposed learnings

    ## <category>
    - [YYYY-MM-DD] <learning>
      - id: p-1a2b3c4d
      - from: YYYY-MM-DD HH:MM:SS <the warm entry's action>
      - kind: decision
      - supersedes: [YYYY-MM-DD] <the learning of MEMORY.md it updates>

A proposal's first line is exactly a MEMORY.md learning line (so a person can move it there by hand); the
indented `  - key: value` lines right below it say where it came from. Sections, learnings and fences are read
by memd.tiers.cold_format's rules. A learning line without an `id` (written by hand) gets one derived from its
category, date and text, stable as long as the line is. Values go through `memd.textfmt.escape_inline`. Edits
add or remove whole proposals and leave every other byte as it was (a section left with no learning goes with
it). Imports memd.tiers.cold_format and memd.textfmt.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from memd.textfmt import escape_inline, unescape_inline
from memd.tiers import cold_format

PREAMBLE = (
    "# Proposed learnings\n"
    "\n"
    "Candidates memd found in warm days before retention removed them. Nothing here is loaded into the context.\n"
    "Accept one with `memd accept WORKSPACE ID` (or move its line into MEMORY.md), reject one with\n"
    "`memd reject WORKSPACE ID` (or delete its lines).\n"
)
KEYS = ("id", "from", "kind", "supersedes")
_META_RE = re.compile(r"  - (id|from|kind|supersedes): ?(.*)")
_FROM_RE = re.compile(r"([0-9]{4}-[0-9]{2}-[0-9]{2})(?: ([0-9]{2}:[0-9]{2}:[0-9]{2}))?(?: (.*))?")
_LINE_RE = re.compile(r"\[([0-9]{4}-[0-9]{2}-[0-9]{2})\] ?(.*)")
_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True, slots=True)
class Proposal:
    """One candidate learning. `line`/`end`: its lines in the file (0-based, end exclusive; -1 when not in one)."""

    id: str
    category: str
    date: str  # YYYY-MM-DD: the day of the warm entry it came from (the learning line's date)
    text: str
    day: str = ""  # the source day file's date ("" when unknown: written by hand)
    time: str = ""  # the source entry's HH:MM:SS
    action: str = ""  # the source entry's action
    kind: str = ""  # decision | fix | notable | note | llm, or "" when written by hand
    supersedes: tuple[str, str] | None = None  # (date, text) of the MEMORY.md learning it updates
    line: int = -1
    end: int = -1

    @property
    def source(self) -> str:
        """Where it came from, as the `from:` line writes it."""
        return " ".join(part for part in (self.day, self.time, self.action) if part)


def derived_id(*parts: str) -> str:
    """A short stable id for a proposal: `p-` and 8 hex digits of a BLAKE2b over `parts`."""
    digest = hashlib.blake2b("\x00".join(parts).encode("utf-8", "surrogatepass"), digest_size=4)
    return "p-" + digest.hexdigest()


def parse(text: str) -> list[Proposal]:
    """Every proposal in file order. Never raises."""
    lines = text.split("\n") if text else []
    proposals: list[Proposal] = []
    seen: set[str] = set()
    for line, learning in cold_format.located_learnings(text):
        meta: dict[str, str] = {}
        end = line + 1
        while end < len(lines):
            match = _META_RE.fullmatch(lines[end].removesuffix("\r"))
            if match is None or match[1] in meta:
                break
            meta[match[1]] = unescape_inline(match[2].strip())
            end += 1
        pid = meta.get("id", "")
        if not _ID_RE.fullmatch(pid) or pid in seen:  # by hand, or a copied block: one derived from the line
            pid = derived_id(learning.category, learning.date, learning.text, str(len(seen)) if pid in seen else "")
        seen.add(pid)
        day = time = action = ""
        if (found := _FROM_RE.fullmatch(meta.get("from", ""))) is not None:
            day, time, action = found[1], found[2] or "", found[3] or ""
        supersedes = None
        if (old := _LINE_RE.fullmatch(meta.get("supersedes", ""))) is not None:
            supersedes = (old[1], old[2])
        proposals.append(
            Proposal(
                pid,
                learning.category,
                learning.date,
                learning.text,
                day,
                time,
                action,
                meta.get("kind", ""),
                supersedes,
                line,
                end,
            )
        )
    return proposals


def render(proposal: Proposal) -> str:
    """The lines of one proposal (its learning line, then its `  - key: value` lines), each ending in LF.
    Raises ValueError for a malformed date (as cold_format.render_learning does)."""
    out = cold_format.render_learning(proposal.date, proposal.text)
    out += f"  - id: {escape_inline(proposal.id)}\n"
    if proposal.source:
        out += f"  - from: {escape_inline(proposal.source)}\n"
    if proposal.kind:
        out += f"  - kind: {escape_inline(proposal.kind)}\n"
    if proposal.supersedes is not None:
        day, old = proposal.supersedes
        out += f"  - supersedes: [{day}] {escape_inline(old)}\n"
    return out


def insert(document: str, proposal: Proposal) -> str:
    """`document` with `proposal` added last under `## category` (a section created at the end when missing; an
    empty document first gets the preamble). Every other byte stays as it was."""
    block = render(proposal)
    heading = cold_format.escape_category(proposal.category)
    lines = document.split("\n") if document else []
    start = _section_of(lines, heading)
    if start is None:
        base = document or PREAMBLE
        if not base.endswith("\n"):
            base += "\n"
        return f"{base}\n## {heading}\n{block}"
    stop = _section_end(lines, start)
    last = start
    for number in range(start + 1, stop):
        if lines[number].strip():
            last = number
    offset = sum(len(raw) + 1 for raw in lines[: last + 1])
    if offset > len(document):  # the section's last line is the file's last and has no "\n"
        return f"{document}\n{block}"
    return document[:offset] + block + document[offset:]


def remove(document: str, proposal: Proposal) -> str:
    """`document` without the lines of `proposal` (as parsed from this very document), and without its section's
    heading when no learning is left under it (the blank lines around it go too)."""
    lines = document.split("\n")
    kept = lines[: proposal.line] + lines[proposal.end :]
    text = "\n".join(kept)
    if not proposal.category.strip() or any(p.category == proposal.category for p in parse(text)):
        return text
    heading = _section_of(kept, cold_format.escape_category(proposal.category))
    if heading is None:
        return text
    stop = _section_end(kept, heading)
    if any(raw.strip() for raw in kept[heading + 1 : stop]):  # prose under it: the person's, keep the heading
        return text
    if stop == len(kept) and kept[-1] == "":  # keep the file's last line end
        stop -= 1
    first = heading - 1 if heading > 0 and not kept[heading - 1].strip() else heading  # the blank line memd wrote
    del kept[first:stop]
    return "\n".join(kept)


def find(proposals: Sequence[Proposal], pid: str) -> Proposal | None:
    for proposal in proposals:
        if proposal.id == pid:
            return proposal
    return None


def with_id(proposal: Proposal, pid: str) -> Proposal:
    return replace(proposal, id=pid)


def _section_of(lines: list[str], heading: str) -> int | None:
    fenced = cold_format.fenced_lines(lines)
    for number, raw in enumerate(lines):
        if number not in fenced and cold_format.heading_text(raw) == heading:
            return number
    return None


def _section_end(lines: list[str], start: int) -> int:
    fenced = cold_format.fenced_lines(lines)
    for number in range(start + 1, len(lines)):
        if number not in fenced and cold_format.heading_text(lines[number]) is not None:
            return number
    return len(lines)
