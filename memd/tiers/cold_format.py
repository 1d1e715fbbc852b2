"""The cold tier's file format: parse `cold/MEMORY.md` and insert learnings into it. Pure: no I/O.

    # Agent Memory

    ## <category>
    - [YYYY-MM-DD] <learning>

Categories and learning texts go through `memd.textfmt.escape_inline`, so they are single lines (no line break
of any kind) that cannot start a heading or a section. MEMORY.md belongs to people as much as to memd: an
insertion adds exactly one learning line (and, for a new category, its heading) and leaves every other byte as
it was. Lines inside a closed fenced code block are prose, so a "## " line in a code sample is not a section.
A burst of learnings is appended at the end in blocks of one learning each (`append_learning_at`) and folded back
later (`fold_appended`): the fold is exactly what inserting them one by one makes. Imports only memd.textfmt.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator, Sequence
from datetime import date
from typing import NamedTuple

from memd.textfmt import escape_inline, unescape_inline

# What memd writes into an empty MEMORY.md before the first section; the section adds its own blank line.
MEMORY_PREAMBLE = "# Agent Memory\n"

_DAY_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_HEADING_RE = re.compile(r"##(?:[ \t](.*))?")
# The optional text tolerates an editor that stripped the space after "]" of an empty learning.
_LEARNING_RE = re.compile(r"- \[([0-9]{4}-[0-9]{2}-[0-9]{2})\](?: (.*))?")
_FENCE_RE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")


class Learning(NamedTuple):
    """A learning as read from MEMORY.md, without where it is: the cold store keeps its learnings across insertions
    that move every one below a line down (memd.tiers.cold_learnings); `located_learnings` says where each is."""

    category: str  # "" for a learning above the first section
    date: str  # "YYYY-MM-DD", interned: a file holds few dates, each on many lines (64 bytes a line otherwise)
    text: str


class Section(NamedTuple):
    """A `## ` heading line outside fences, as `parse_sections` finds it."""

    offset: int  # where its line starts in the text
    category: str
    first: int  # index, in the learnings of the text, of the first learning below it (their count when none is)


def _split_lines(text: str) -> list[str]:
    # Each line but the last was followed by one "\n", which keeps offsets easy to sum. Split on "\n" only:
    # memd escapes every other line break, so a \x0b, \u2028 and the like in the file was typed by a person
    # inside a line and is content of it (str.splitlines() would split there).
    return text.split("\n") if text else []


def _content(raw: str) -> str:
    # A line without its CRLF "\r" and without a byte-order mark some Windows editors put at the file start.
    return raw.removesuffix("\r").removeprefix("\ufeff")


def _fenced_lines(lines: Sequence[str]) -> set[int]:
    """Line numbers inside closed fenced code blocks, fence lines included.

    An unclosed fence is no fence: otherwise one stray ``` would hide every later section, and memd would
    append learnings that no reader could see.
    """
    fenced: set[int] = set()
    opener: tuple[int, str] | None = None
    for number, raw in enumerate(lines):
        match = _FENCE_RE.fullmatch(_content(raw))
        if match is None:
            continue
        marker, rest = match[1], match[2]
        if opener is None:
            if not (marker[0] == "`" and "`" in rest):  # CommonMark: a backtick info string has no backtick
                opener = (number, marker)
        elif marker[0] == opener[1][0] and len(marker) >= len(opener[1]) and not rest.strip():
            fenced.update(range(opener[0], number + 1))
            opener = None
    return fenced


def is_fence_line(raw: str) -> bool:
    """Could this line open or close a fenced code block?"""
    return _FENCE_RE.fullmatch(_content(raw)) is not None


def _heading_text(raw: str) -> str | None:
    match = _HEADING_RE.fullmatch(_content(raw))
    if match is None:
        return None
    return (match[1] or "").strip()


# What memd.tiers.proposals_format reads PROPOSED.md's sections with: the same rules as MEMORY.md's.
fenced_lines = _fenced_lines
heading_text = _heading_text


def parse_sections(text: str) -> tuple[list[Learning], list[int], list[Section]]:
    """Every learning in file order with the `## ` section it sits under, the 0-based line of each, and the
    sections. Never raises."""
    lines = _split_lines(text)
    fenced = _fenced_lines(lines)
    learnings: list[Learning] = []
    numbers: list[int] = []
    sections: list[Section] = []
    category = ""
    offset = 0
    for number, raw in enumerate(lines):
        start, offset = offset, offset + len(raw) + 1
        if number in fenced:
            continue
        heading = _heading_text(raw)
        if heading is not None:
            # interned: a burst appends each learning under a heading line of its own (append_learning_at), and a
            # list of the learnings would hold a copy of the category per learning
            category = sys.intern(unescape_inline(heading))
            sections.append(Section(start, category, len(learnings)))
            continue
        match = _LEARNING_RE.fullmatch(_content(raw))
        if match is not None:
            learnings.append(Learning(category, sys.intern(match[1]), unescape_inline(match[2] or "")))
            numbers.append(number)
    return learnings, numbers, sections


def parse_memory(text: str) -> list[Learning]:
    """Every learning in file order, with the `## ` section it sits under. Never raises."""
    return parse_sections(text)[0]


def located_learnings(text: str) -> list[tuple[int, Learning]]:
    """Every learning in file order with its 0-based line number. Never raises."""
    learnings, numbers, _ = parse_sections(text)
    return list(zip(numbers, learnings, strict=True))


def iter_located_learnings(text: str) -> Iterator[tuple[int, Learning]]:
    """`located_learnings`, one at a time: a text without a fence marker (`may_fence`) is read a line at a time,
    never held as a list of its lines and learnings. The search thread reads a whole MEMORY.md after every fold;
    80,000 lines and their learnings made at once grew pymalloc's arenas by ~16 MB each time, and the learnings the
    daemon keeps, allocated between, stopped them from being given back (bench/learnings_rss.py)."""
    if may_fence(text):  # a fence is known only once its closing line is read: the lines are needed first
        yield from located_learnings(text)
        return
    category = ""
    start = number = 0
    while text:
        end = text.find("\n", start)
        raw = text[start:] if end < 0 else text[start:end]
        heading = _heading_text(raw)
        if heading is not None:
            category = sys.intern(unescape_inline(heading))
        else:
            match = _LEARNING_RE.fullmatch(_content(raw))
            if match is not None:
                yield number, Learning(category, sys.intern(match[1]), unescape_inline(match[2] or ""))
        if end < 0:
            return
        start, number = end + 1, number + 1


def learning_line(text: str) -> re.Match[str] | None:
    """A line (without its line end) read as a learning line: groups 1, the day, and 2, the text (escaped)."""
    return _LEARNING_RE.fullmatch(_content(text))


def _check_day(day: str) -> None:
    try:
        valid = _DAY_RE.fullmatch(day) is not None and date.fromisoformat(day).isoformat() == day
    except ValueError:
        valid = False
    if not valid:
        raise ValueError(f"learning date must be a calendar date YYYY-MM-DD, got {day!r}")


def render_learning(day: str, text: str) -> str:
    """One learning line to write. A `day` that is not a YYYY-MM-DD calendar date raises ValueError."""
    _check_day(day)
    return shown_learning(day, text)


def shown_learning(day: str, text: str) -> str:
    """One learning line as read back from MEMORY.md, for a read to show: `day` as the file has it, which the
    parse only held to the YYYY-MM-DD shape (a person's `2026-02-30` is shown as typed; checking it here made
    every `cold.get` and `context.get` of the workspace fail until the file was fixed)."""
    return f"- [{day}] {escape_inline(text)}\n"


def escape_category(category: str) -> str:
    """The heading text for `category`: surrounding whitespace dropped (a heading could not keep it), escaped.
    An empty result raises ValueError."""
    escaped = escape_inline(category.strip())
    if not escaped:
        raise ValueError("learning category must not be empty")
    return escaped


def insert_learning(document: str, category: str, day: str, text: str) -> str:
    """`document` with the learning added first under `## category` (created at the end if missing).

    The result is `document` with the inserted bytes added and nothing else changed, except that a document
    not ending in "\\n" gets one before an insertion at its end. Raises ValueError for an empty category or
    a malformed day.
    """
    return insert_learning_at(document, category, day, text)[0]


def insert_learning_at(
    document: str, category: str, day: str, text: str, fence_free: bool = False
) -> tuple[str, int, str]:
    """`insert_learning`, and where and what it inserted: (result, at, added), the result being
    `document[:at] + added + document[at:]` (an empty document gets the preamble as part of `added`).
    `fence_free`: the caller knows `not may_fence(document)` (a look through all of it, ~1 ms a MB)."""
    return _insert_line_at(document, escape_category(category), render_learning(day, text), fence_free)


def _insert_line_at(document: str, heading: str, line: str, fence_free: bool) -> tuple[str, int, str]:
    """`insert_learning_at` for a rendered learning line (or several, the first on top) and an escaped heading."""
    if fence_free or not may_fence(document):
        insert_at = _section_start(document, heading)
        if insert_at is not None:
            return document[:insert_at] + line + document[insert_at:], insert_at, line
    return _insert_by_lines(document, heading, line)


def _insert_by_lines(document: str, heading: str, line: str) -> tuple[str, int, str]:
    """`insert_learning_at`, reading the document line by line (fences, a missing section, a last line without
    "\n")."""
    lines = _split_lines(document)
    fenced = _fenced_lines(lines)
    offset = 0
    insert_at: int | None = None
    in_section = False
    for number, raw in enumerate(lines):
        line_end = offset + len(raw) + 1  # the "\n" after it (one past the end for the last line)
        if number not in fenced:
            found = _heading_text(raw)
            if in_section and found is not None:
                break
            if in_section and _LEARNING_RE.fullmatch(_content(raw)):
                insert_at = offset
                break
            if found == heading:
                in_section = True
                insert_at = line_end
        offset = line_end
    if insert_at is None:
        base = document or MEMORY_PREAMBLE
        if not base.endswith("\n"):
            base += "\n"
        added = f"{base}\n## {heading}\n{line}"[len(document) :]
        return document + added, len(document), added
    if insert_at > len(document):  # the heading is the last line and has no "\n"
        return f"{document}\n{line}", len(document), f"\n{line}"
    return document[:insert_at] + line + document[insert_at:], insert_at, line


def learning_copies(document: str, category: str, day: str, text: str) -> int:
    """How many times this learning is in `document` under a `## category` heading (its section, blocks a burst
    appended), as `parse_memory` reads it. A search for the line and the heading above each place it is (~1 ms a
    MB) where the file is plain ("\n" line ends, no fence, a last line ended); else the parse."""
    heading, line = escape_category(category), render_learning(day, text)
    if "\r" in document or (document and not document.endswith("\n")) or may_fence(document):
        wanted = parse_memory(f"## {heading}\n{line}")  # the learning as the parse reads it back
        return sum(1 for lr in parse_memory(document) if [lr] == wanted)
    copies = 0
    at = document.find(line)
    while at >= 0:
        if at == 0 or document[at - 1] == "\n":
            copies += _heading_above(document, at) == heading
        at = document.find(line, at + 1)
    return copies


def _heading_above(document: str, at: int) -> str | None:
    """The text of the nearest `##` heading above the line that starts at `at`, or None."""
    above = document.rfind("\n##", 0, at)
    while above >= 0:
        found = _heading_text(document[above + 1 : document.find("\n", above + 1)])
        if found is not None:
            return found
        above = document.rfind("\n##", 0, above)
    return _heading_text(document[: document.find("\n")])  # the first line, or none


def append_learning_at(document: str, category: str, day: str, text: str) -> tuple[str, int, str] | None:
    """The learning added at the end of `document` instead of first under its section: in a block of its own,
    `\n## category\n- [day] text\n` after the last line, as `insert_learning` makes a new section. What a burst
    of learnings appends (memd.tiers.cold_store) is folded back by `fold_appended`. Returns (result, at, added)
    like `insert_learning_at`, `at` being len(document); None for an empty document (the preamble is
    `insert_learning`'s to write). Raises ValueError as `insert_learning` does. Whether the document may hold an
    unclosed fence that would swallow the block is the caller's to know (it appends only to a fence-free one)."""
    if not document:
        return None
    added = appended_block(document.endswith("\n"), category, day, text)
    return document + added, len(document), added


def appended_block(after_line_end: bool, category: str, day: str, text: str) -> str:
    """What `append_learning_at` adds after a non-empty document: the block, led by a "\n" that ends the
    document's last line unless `after_line_end` (the document ends with one). Raises ValueError as
    `insert_learning` does."""
    line = render_learning(day, text)
    heading = escape_category(category)
    return ("" if after_line_end else "\n") + f"\n## {heading}\n{line}"


# One block `append_learning_at` appends: a blank line, a heading, one learning line.
_APPENDED_BLOCK_RE = re.compile(r"\n## ([^\n]+)\n(- \[[0-9]{4}-[0-9]{2}-[0-9]{2}\] [^\n]*\n)")


def parse_appended(run: str) -> list[tuple[str, str]] | None:
    """The (heading, learning line) of each block in `run`, a text that `append_learning_at` calls made: blocks
    only, the first perhaps after the "\n" that ended an open last line. None when `run` is anything else."""
    position = 1 if run.startswith("\n\n") else 0
    blocks: list[tuple[str, str]] = []
    while position < len(run):
        match = _APPENDED_BLOCK_RE.match(run, position)
        if match is None:
            return None
        blocks.append((match[1], match[2]))
        position = match.end()
    return blocks


def fold_appended(base: str, blocks: Sequence[tuple[str, str]]) -> str:
    """`base` with the learnings of `blocks` (parse_appended, in the order they were appended) inserted first under
    their sections, one by one: byte for byte what `insert_learning` makes of `base` and the same learnings in the
    same order. Made a section at a time (all of one section's go in at once, the last appended on top), not a
    learning at a time: a fold of 1,000 learnings copies a 2 MB file a few times, not 1,000 times."""
    return fold_appended_steps(base, blocks)[0]


def fold_appended_steps(base: str, blocks: Sequence[tuple[str, str]]) -> tuple[str, list[tuple[str, int, str]]]:
    """`fold_appended`, and its insertions in order: (the text before, where, what), one per section, each what
    `insert_learning_at` returns for the section's lines (so that the learnings parsed from `base` can be moved
    instead of parsed again: memd.tiers.cold_learnings, Learnings.folded)."""
    by_heading: dict[str, list[str]] = {}
    for heading, line in blocks:
        by_heading.setdefault(heading, []).append(line)
    document = base
    steps: list[tuple[str, int, str]] = []
    for heading, lines in by_heading.items():
        after, at, added = _insert_line_at(document, heading, "".join(reversed(lines)), fence_free=False)
        steps.append((document, at, added))
        document = after
    return document, steps


def may_fence(document: str) -> bool:
    return "```" in document or "~~~" in document


def may_fence_after(document: str, at: int, added: str) -> bool:
    """`may_fence(document[:at] + added + document[at:])` for a `document` known to hold no fence marker: only
    `added` and its seams are looked at (a marker is three characters, so one across a seam lies within two of it)."""
    return may_fence(document[max(0, at - 2) : at] + added + document[at : at + 2])


def _section_start(document: str, heading: str) -> int | None:
    """Where `insert_learning` puts a learning under `heading` in a document without fences: before the first
    learning of the first `## heading` section, or right after its heading line when it has none (found by
    searching for the heading's text, not by reading every line: a MEMORY.md of 20,000 learnings takes
    ~13 ms to split). None when there is no such section, or it is the document's last line without a "\n"
    (the caller's line-by-line way handles both)."""
    at = document.find(heading)
    while at >= 0:
        start = document.rfind("\n", 0, at) + 1
        end = document.find("\n", at)
        if end < 0:
            return None
        if _heading_text(document[start:end]) == heading:
            position = end + 1
            while position < len(document):  # prose between the heading and its first learning stays above it
                next_end = document.find("\n", position)
                raw = document[position : len(document) if next_end < 0 else next_end]
                if _heading_text(raw) is not None:
                    return end + 1
                if _LEARNING_RE.fullmatch(_content(raw)):
                    return position
                if next_end < 0:
                    break
                position = next_end + 1
            return end + 1
        at = document.find(heading, end)
    return None


def remove_line(document: str, line: int) -> str:
    """`document` without its line number `line` (0-based) and that line's end: what accepting a proposal that
    supersedes a learning does to the learning's line (memd.handlers.proposals). Every other byte stays."""
    lines = _split_lines(document)
    if not 0 <= line < len(lines):
        return document
    del lines[line]
    return "\n".join(lines)
