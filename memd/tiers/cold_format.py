"""The cold tier's file format: parse `cold/MEMORY.md` and insert learnings into it. Pure: no I/O.

    # Agent Memory

    ## <category>
    - [YYYY-MM-DD] <learning>

Categories and learning texts go through `memd.textfmt.escape_inline`, so they are single lines (no line break
of any kind) that cannot start a heading or a section. MEMORY.md belongs to people as much as to memd: an
insertion adds exactly one learning line (and, for a new category, its heading) and leaves every other byte as
it was. Lines inside a closed fenced code block are prose, so a "## " line in a code sample is not a section.
Imports only memd.textfmt.
"""

from __future__ import annotations

import bisect
import operator
import re
from collections.abc import Sequence
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
_WORD_RE = re.compile(r"\w+")


class Learning(NamedTuple):
    """A learning as read from MEMORY.md. A named tuple, not a dataclass: a learning inserted near the top moves
    every one after it a line down (parsed_after_insert), and a tuple is made in less than half the time."""

    category: str  # "" for a learning above the first section
    date: str  # "YYYY-MM-DD"
    text: str
    line: int  # 0-based line number in the file


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


def _heading_text(raw: str) -> str | None:
    match = _HEADING_RE.fullmatch(_content(raw))
    if match is None:
        return None
    return (match[1] or "").strip()


# What memd.tiers.proposals_format reads PROPOSED.md's sections with: the same rules as MEMORY.md's.
fenced_lines = _fenced_lines
heading_text = _heading_text


def parse_memory(text: str) -> list[Learning]:
    """Every learning in file order, with the `## ` section it sits under. Never raises."""
    lines = _split_lines(text)
    fenced = _fenced_lines(lines)
    learnings: list[Learning] = []
    category = ""
    for number, raw in enumerate(lines):
        if number in fenced:
            continue
        heading = _heading_text(raw)
        if heading is not None:
            category = unescape_inline(heading)
            continue
        match = _LEARNING_RE.fullmatch(_content(raw))
        if match is not None:
            learnings.append(Learning(category, match[1], unescape_inline(match[2] or ""), number))
    return learnings


def _check_day(day: str) -> None:
    try:
        valid = _DAY_RE.fullmatch(day) is not None and date.fromisoformat(day).isoformat() == day
    except ValueError:
        valid = False
    if not valid:
        raise ValueError(f"learning date must be a calendar date YYYY-MM-DD, got {day!r}")


def render_learning(day: str, text: str) -> str:
    """One learning line. A `day` that is not a YYYY-MM-DD calendar date raises ValueError."""
    _check_day(day)
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


def insert_learning_at(document: str, category: str, day: str, text: str) -> tuple[str, int, str]:
    """`insert_learning`, and where and what it inserted: (result, at, added), the result being
    `document[:at] + added + document[at:]` (an empty document gets the preamble as part of `added`)."""
    line = render_learning(day, text)
    heading = escape_category(category)
    if not _may_fence(document):
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


def _may_fence(document: str) -> bool:
    return "```" in document or "~~~" in document


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


def parsed_after_insert(learnings: list[Learning], document: str, at: int, added: str) -> list[Learning] | None:
    """`parse_memory(document[:at] + added + document[at:])`, from `learnings` (`parse_memory(document)`) when
    `added` is one learning line inserted at the start of a line (what `insert_learning` does under an existing
    section), without reading the rest of the document; None when that cannot be told this way (anything else
    inserted, a document that may hold fences): parse the new document instead."""
    # An insertion found by comparing the two texts may start inside a line: a learning inserted before another
    # shares its first characters ("- [2026-12-0"), and the first difference comes after them. The same
    # insertion, moved back over what it shares, starts at the line's start.
    while at and document[at - 1] != "\n" and added and document[at - 1] == added[-1]:
        at -= 1
        added = added[-1] + added[:-1]
    if added.count("\n") != 1 or not added.endswith("\n") or (at and document[at - 1] != "\n"):
        return None
    if _may_fence(document) or _may_fence(added) or at > len(document):
        return None
    match = _LEARNING_RE.fullmatch(_content(added[:-1]))
    if match is None:
        return None
    number = document.count("\n", 0, at)
    index = bisect.bisect_left(learnings, number, key=lambda lr: lr.line)
    category = ""
    end = at  # the category: from the nearest heading or learning above, walking up line by line
    for above in range(number - 1, -1, -1):
        start = document.rfind("\n", 0, end - 1) + 1
        raw = document[start : end - 1]
        heading = _heading_text(raw)
        if heading is not None:
            category = unescape_inline(heading)
            break
        if index and learnings[index - 1].line == above:
            category = learnings[index - 1].category
            break
        end = start
    inserted = Learning(category, match[1], unescape_inline(match[2] or ""), number)
    make = tuple.__new__  # Learning's own constructor, without its argument handling (~2.5x faster)
    return [
        *learnings[:index],
        inserted,
        *(make(Learning, (lr[0], lr[1], lr[2], lr[3] + 1)) for lr in learnings[index:]),
    ]


def remove_line(document: str, line: int) -> str:
    """`document` without its line number `line` (0-based) and that line's end: what accepting a proposal that
    supersedes a learning does to the learning's line (memd.handlers.proposals). Every other byte stays."""
    lines = _split_lines(document)
    if not 0 <= line < len(lines):
        return document
    del lines[line]
    return "\n".join(lines)


_DATE = operator.itemgetter(1)  # Learning.date
_SCORE = operator.itemgetter(0)


def _words(topic: str) -> list[str]:
    return list(dict.fromkeys(w.lower() for w in _WORD_RE.findall(topic) if len(w) >= 2))


def relevant(learnings: Sequence[Learning], topic: str | None) -> list[Learning]:
    """Learnings for `topic`, best first; all of them, newest first, when there is no topic.

    Each distinct topic word (2+ characters) scores 2 when found in the category and 1 when found in the text
    (case-insensitive substrings); only learnings scoring above 0 are kept, ordered by score then date,
    newest first. A topic without any such word counts as no topic: better the newest learnings than none.
    """
    newest_first = sorted(learnings, key=_DATE, reverse=True)
    words = _words(topic or "")
    if not words:
        return newest_first
    # A category's score once per category (a file has few), and one word (most topics) without a generator:
    # this runs on every read with a topic, over every learning (55 ms at 20,000 learnings before, ~8 ms now).
    by_category = {c: 2 * sum(w in c.lower() for w in words) for c in {item.category for item in learnings}}
    scored: list[tuple[int, Learning]] = []
    if len(words) == 1:
        word = words[0]
        for item in newest_first:
            score = by_category[item.category] + (word in item.text.lower())
            if score:
                scored.append((score, item))
    else:
        for item in newest_first:
            text = item.text.lower()
            score = by_category[item.category] + sum(w in text for w in words)
            if score:
                scored.append((score, item))
    scored.sort(key=_SCORE, reverse=True)
    return [item for _, item in scored]
