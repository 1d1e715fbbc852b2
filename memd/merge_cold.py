"""The merge of `cold/MEMORY.md` (memd.merge_driver's `cold` kind): learnings keyed by (category, text), dates
aside. Kept when on both sides or added on one (not in the ancestor): a learning deleted on one side and untouched
on the other stays deleted, and one added on both sides is kept once. Learnings added on the other side go first
in their section (as memd inserts them); sections new on the other side are appended. A learning edited
differently on both sides (the same ancestor line replaced by two different similar lines) is a conflict, and so
is prose (anything that is not a learning) changed differently on both sides in the same section. Pure.
Imports memd.merge_common, memd.tiers.cold_format (its section, learning and fence rules) and the standard library
only: git starts the merge driver in a fresh process for every file it merges.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from dataclasses import dataclass, field

from memd.merge_common import Merged, as_bytes, as_text
from memd.tiers import cold_format

_LEARNING = re.compile(r"- \[([0-9]{4}-[0-9]{2}-[0-9]{2})\](?: (.*))?")
EDIT_SIMILARITY = 0.5  # a replaced learning this similar to the ancestor's line is an edit of it, not a new one


@dataclass
class _Section:
    key: tuple[str, int] | None  # (heading text, occurrence); None: the preamble above every section
    lines: list[str] = field(default_factory=list)  # its lines, heading first (raw, without "\n")
    learning_at: dict[int, str] = field(default_factory=dict)  # index in `lines` -> learning text

    @property
    def category(self) -> str:
        return self.key[0] if self.key is not None else ""

    def prose(self) -> list[str]:
        """Its other lines, for telling whether they changed (blank lines and trailing blanks are layout)."""
        return [line.rstrip() for i, line in enumerate(self.lines) if i not in self.learning_at and line.strip()]

    def learnings(self) -> list[str]:
        return [self.learning_at[i] for i in sorted(self.learning_at)]


def _sections(text: str) -> list[_Section]:
    lines = text.split("\n")
    trailing_newline = bool(lines) and lines[-1] == ""
    if trailing_newline:
        lines.pop()
    fenced = cold_format.fenced_lines(lines)
    sections = [_Section(None)]
    occurrences: Counter[str] = Counter()
    for number, raw in enumerate(lines):
        heading = None if number in fenced else cold_format.heading_text(raw)
        if heading is not None:
            sections.append(_Section((heading, occurrences[heading])))
            occurrences[heading] += 1
        section = sections[-1]
        match = None if number in fenced else _LEARNING.fullmatch(raw.removesuffix("\r").removeprefix("\ufeff"))
        if match is not None and heading is None:
            section.learning_at[len(section.lines)] = (match[2] or "").strip()
        section.lines.append(raw)
    return sections


def merge_cold(base: bytes, ours: bytes, theirs: bytes) -> Merged:
    """Learnings of both sides under their categories, deduplicated by text (see the module docstring)."""
    if ours == theirs or theirs == base:
        return Merged(ours)
    if ours == base:
        return Merged(theirs)
    sb, so, st = (_sections(as_text(x)) for x in (base, ours, theirs))
    by_b, by_o, by_t = ({s.key: s for s in side} for side in (sb, so, st))
    kb, ko, kt = (_learning_keys(side) for side in (sb, so, st))
    wanted = (ko & kt) | (ko - kb) | (kt - kb)
    conflicts = _edit_conflicts(by_b, by_o, by_t, ko, kt)

    order = [s.key for s in so]
    order += [s.key for s in st if s.key not in by_o]
    out: list[str] = []
    placed: set[tuple[str, str]] = set()
    for key in order:
        o_sec, t_sec, b_sec = by_o.get(key), by_t.get(key), by_b.get(key)
        category = key[0] if key is not None else ""
        needed = [k for k in wanted if k[0] == category and k not in placed]
        if o_sec is None or t_sec is None:
            present = o_sec or t_sec
            assert present is not None
            if b_sec is not None and present.lines == b_sec.lines and not _has_new(needed, b_sec):
                continue  # deleted on one side, untouched on the other: stays deleted
            layout, other = present, None
        else:
            po, pt, pb = o_sec.prose(), t_sec.prose(), b_sec.prose() if b_sec is not None else None
            if pt in (pb, po):
                layout, other = o_sec, t_sec
            elif po == pb:
                layout, other = t_sec, o_sec
            else:
                conflicts.append(f"section {category or '(above every section)'!r}: its text changed on both sides")
                layout, other = o_sec, t_sec
        out += _render_section(layout, other, wanted, placed, category)
    for category in sorted({k[0] for k in wanted - placed}):  # a section deleted on one side, learnings added on
        lines = [f"- [{_date_of(k, so, st)}] {k[1]}" for k in sorted(wanted - placed) if k[0] == category]
        if out and out[-1].strip():
            out.append("")
        out += ([f"## {category}"] if category else []) + lines
        placed.update(k for k in wanted if k[0] == category)
    text = "".join(line + "\n" for line in out)
    return Merged(ours if as_bytes(text) == ours else as_bytes(text), tuple(conflicts))


def _learning_keys(sections: list[_Section]) -> set[tuple[str, str]]:
    return {(s.category, text) for s in sections for text in s.learnings()}


def _has_new(needed: list[tuple[str, str]], base: _Section) -> bool:
    return any(k[1] not in base.learnings() for k in needed)


def _date_of(key: tuple[str, str], *sides: list[_Section]) -> str:
    for side in sides:
        for s in side:
            if s.category == key[0]:
                for i, text in s.learning_at.items():
                    if text == key[1]:
                        m = _LEARNING.fullmatch(s.lines[i].removesuffix("\r").removeprefix("\ufeff"))
                        if m:
                            return m[1]
    return "0000-00-00"


def _render_section(
    layout: _Section,
    other: _Section | None,
    wanted: set[tuple[str, str]],
    placed: set[tuple[str, str]],
    category: str,
) -> list[str]:
    """`layout`'s lines, its learnings filtered to `wanted`, and `other`'s wanted learnings that `layout` lacks
    inserted before its first learning (or after its heading)."""
    own = set(layout.learnings())
    additions = []
    if other is not None:
        for i in sorted(other.learning_at):
            key = (category, other.learning_at[i])
            if key in wanted and key[1] not in own and key not in placed:
                additions.append(other.lines[i].removesuffix("\r"))
                placed.add(key)
                own.add(key[1])
    out: list[str] = []
    first_learning = min(layout.learning_at) if layout.learning_at else (1 if layout.key is not None else None)
    for i, line in enumerate(layout.lines):
        if i == first_learning:
            out += additions
            additions = []
        if i in layout.learning_at:
            key = (category, layout.learning_at[i])
            if key not in wanted:
                continue
            placed.add(key)
        out.append(line)
    if additions:  # a section of only its heading (or an empty preamble)
        out += additions
    return out


def _edit_conflicts(
    by_b: dict[tuple[str, int] | None, _Section],
    by_o: dict[tuple[str, int] | None, _Section],
    by_t: dict[tuple[str, int] | None, _Section],
    ko: set[tuple[str, str]],
    kt: set[tuple[str, str]],
) -> list[str]:
    conflicts = []
    for key, b_sec in by_b.items():
        o_sec, t_sec = by_o.get(key), by_t.get(key)
        if o_sec is None or t_sec is None:
            continue
        category = b_sec.category
        edits_o = _edits(b_sec.learnings(), o_sec.learnings())
        edits_t = _edits(b_sec.learnings(), t_sec.learnings())
        for old, new_o in edits_o.items():
            new_t = edits_t.get(old)
            if new_t is None or new_t == new_o:
                continue
            if (category, new_o) in kt or (category, new_t) in ko:
                continue  # one side took the other's edit too
            conflicts.append(
                f"learning {old!r} in {category or '(above every section)'!r} was edited on both sides: "
                f"{new_o!r} here, {new_t!r} there"
            )
    return conflicts


def _edits(base: list[str], side: list[str]) -> dict[str, str]:
    """Ancestor learning -> the line that replaced it on `side`, where a one-for-one replacement is similar."""
    edits = {}
    matcher = difflib.SequenceMatcher(a=base, b=side, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "replace" or i2 - i1 != j2 - j1:
            continue
        for old, new in zip(base[i1:i2], side[j1:j2], strict=True):
            if new not in base and difflib.SequenceMatcher(a=old, b=new).ratio() >= EDIT_SIMILARITY:
                edits[old] = new
    return edits
