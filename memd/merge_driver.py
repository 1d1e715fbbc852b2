"""Merges of memd's files that cannot lose an entry: pure functions, and the git merge driver that runs them.

git calls the driver for the paths memd's attributes name (memd.gitsync writes them), as
`python -m memd.merge_driver KIND %O %A %B %P`: the ancestor's, ours and theirs' versions in three temporary
files; the result goes into %A; exit 0 for a clean merge, 1 for a conflict (the file then holds conflict markers).

- warm day files (`warm`): append-only logs. An entry is its heading line up to the next entry (or zoned day
  heading), compared without its trailing blank lines. Counted three ways (ancestor, ours, theirs): a side that did
  not change an entry's count takes the other side's (so an entry deleted on one side and untouched on the other
  stays deleted), otherwise the larger count wins (an entry added identically on both sides is kept once). Entries
  come out in time order: each side keeps its own order and the two are interleaved by their `HH:MM:SS`. Never a
  conflict.
- `cold/MEMORY.md` (`cold`): learnings keyed by (category, text), dates aside. Kept when on both sides or added
  on one (not in the ancestor): a learning deleted on one side and untouched on the other stays deleted, and one
  added on both sides is kept once. Learnings added on the other side go first in their section (as memd inserts
  them); sections new on the other side are appended. A learning edited differently on both sides (the same
  ancestor line replaced by two different similar lines) is a conflict, and so is prose (anything that is not a
  learning) changed differently on both sides in the same section.
- the hot tier (`hot`): ours, unless ours is still the common ancestor's (this side's session has not changed
  since), then theirs. The hot tier is one machine's live session; the other version stays in the history (the
  merge commit's other parent), and the files on each machine stay that machine's (memd.sync).
- `cold/PROPOSED.md` (`proposed`): whole proposals (a learning line and its `  - key: value` lines) keyed by
  their id (memd.tiers.proposals_format): ours as it is, less the proposals theirs removed (accepted or rejected
  there) and ours left as they were, plus the proposals theirs added, each under its own section with all its
  lines. A proposal on both sides is kept once. Never a conflict.

Imports memd.tiers.cold_format (its section, learning and fence rules), memd.tiers.proposals_format and the
standard library only: git starts this module in a fresh process for every file it merges.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from memd.tiers import cold_format, proposals_format

KINDS = ("warm", "cold", "hot", "proposed")
_ENTRY = re.compile(r"### ([0-9]{2}:[0-9]{2}:[0-9]{2}) -(?: .*)?")
_DAY_HEADING = re.compile(r"# Activity Log [0-9]{4}-[0-9]{2}-[0-9]{2}\b.*")
_LEARNING = re.compile(r"- \[([0-9]{4}-[0-9]{2}-[0-9]{2})\](?: (.*))?")
EDIT_SIMILARITY = 0.5  # a replaced learning this similar to the ancestor's line is an edit of it, not a new one


@dataclass(frozen=True)
class Merged:
    data: bytes
    conflicts: tuple[str, ...] = ()  # what could not be merged, for people (empty: clean)

    @property
    def clean(self) -> bool:
        return not self.conflicts


def kind_of(path: str) -> str | None:
    """The merge that applies to a workspace path, or None (git's own text merge; a conflict stays one)."""
    if path.startswith("hot/") and path.endswith(".json"):
        return "hot"
    if path == "cold/MEMORY.md":
        return "cold"
    if path == "cold/PROPOSED.md":
        return "proposed"
    if re.fullmatch(r"warm/[0-9]{4}-[0-9]{2}-[0-9]{2}\.md", path):
        return "warm"
    return None


def merge(kind: str, base: bytes, ours: bytes, theirs: bytes) -> Merged:
    if kind == "warm":
        return Merged(merge_warm(base, ours, theirs))
    if kind == "cold":
        return merge_cold(base, ours, theirs)
    if kind == "hot":
        return Merged(theirs if ours == base else ours)
    if kind == "proposed":
        return Merged(merge_proposed(base, ours, theirs))
    raise ValueError(f"unknown merge kind {kind!r} (one of {', '.join(KINDS)})")


def _text(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _counts(keys: Sequence[str]) -> Counter[str]:
    return Counter(keys)


def _three_way_count(b: int, o: int, t: int) -> int:
    if o == b:
        return t
    if t == b:
        return o
    return max(o, t)


# --- warm day files ----------------------------------------------------------------------------------------------


@dataclass
class _Block:
    key: str  # identity: the text without trailing blank lines
    order: tuple[str, int]  # (HH:MM:SS, 1) for an entry; a heading or preamble sorts before the entry after it


def _warm_blocks(text: str) -> list[_Block]:
    lines = text.split("\n")
    starts = [i for i, line in enumerate(lines) if _starts_block(line)]
    if not starts or starts[0] != 0:
        starts.insert(0, 0)
    blocks: list[tuple[str, str | None]] = []
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        body = "\n".join(lines[start:end]).rstrip()
        if not body:
            continue
        m = _ENTRY.fullmatch(lines[start].removesuffix("\r"))
        blocks.append((body, m[1] if m else None))
    out: list[_Block] = []
    for n, (body, time) in enumerate(blocks):
        if time is not None:
            out.append(_Block(body, (time, 1)))
            continue
        following = next((t for _, t in blocks[n + 1 :] if t is not None), "~")
        out.append(_Block(body, ("", 0) if n == 0 else (following, 0)))
    return out


def _starts_block(line: str) -> bool:
    line = line.removesuffix("\r")
    return bool(_ENTRY.fullmatch(line) or _DAY_HEADING.fullmatch(line))


def merge_warm(base: bytes, ours: bytes, theirs: bytes) -> bytes:
    """Both sides' entries, each once, in time order (see the module docstring). Never a conflict."""
    if ours == theirs or theirs == base:
        return ours
    if ours == base:
        return theirs
    b, o, t = (_warm_blocks(_text(x)) for x in (base, ours, theirs))
    cb, co, ct = (_counts([x.key for x in blocks]) for blocks in (b, o, t))
    want = {k: _three_way_count(cb[k], co[k], ct[k]) for k in co.keys() | ct.keys()}
    kept: list[_Block] = []
    taken: Counter[str] = Counter()
    for block in o:
        if taken[block.key] < want[block.key]:
            taken[block.key] += 1
            kept.append(block)
    if len(kept) == len(o) and all(taken[k] >= n for k, n in want.items()):
        return ours  # nothing to add or remove: ours byte for byte
    seen: Counter[str] = Counter()  # occurrences of each entry in theirs so far: the first ones are ours' too
    added: Counter[str] = Counter()
    extra: list[_Block] = []
    for block in t:
        seen[block.key] += 1
        if seen[block.key] > taken[block.key] and taken[block.key] + added[block.key] < want[block.key]:
            added[block.key] += 1
            extra.append(block)
    merged: list[_Block] = []
    i = j = 0
    while i < len(kept) or j < len(extra):
        if j >= len(extra) or (i < len(kept) and kept[i].order <= extra[j].order):
            merged.append(kept[i])
            i += 1
        else:
            merged.append(extra[j])
            j += 1
    return _bytes("".join(block.key + "\n\n" for block in merged))


# --- cold/MEMORY.md ----------------------------------------------------------------------------------------------


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
    sb, so, st = (_sections(_text(x)) for x in (base, ours, theirs))
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
    return Merged(ours if _bytes(text) == ours else _bytes(text), tuple(conflicts))


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


# --- cold/PROPOSED.md --------------------------------------------------------------------------------------------


def merge_proposed(base: bytes, ours: bytes, theirs: bytes) -> bytes:
    """Proposals of both sides by id (see the module docstring): ours' bytes, less the proposals theirs removed
    and ours kept as the ancestor had them, plus theirs' new ones inserted whole into their sections."""
    if ours == theirs or theirs == base:
        return ours
    if ours == base:
        return theirs
    text_b, text_o, text_t = _text(base), _text(ours), _text(theirs)
    pb, po, pt = ({p.id: p for p in proposals_format.parse(t)} for t in (text_b, text_o, text_t))
    block_b, block_o = _blocks(text_b, pb), _blocks(text_o, po)
    # Removed on theirs, left untouched by ours: accepted or rejected over there, so gone here too.
    gone = [pid for pid in po if pid in pb and pid not in pt and block_o[pid] == block_b[pid]]
    added = [p for pid, p in pt.items() if pid not in po and pid not in pb]
    if not gone and not added:
        return ours
    text = text_o
    for pid in gone:
        current = proposals_format.find(proposals_format.parse(text), pid)
        if current is not None:
            text = proposals_format.remove(text, current)
    lines_t = text_t.split("\n")
    for proposal in added:
        try:
            text = proposals_format.insert(text, proposal)
        except ValueError:  # not a date memd can write again: its own lines, at the end
            block = "".join(line + "\n" for line in lines_t[proposal.line : proposal.end])
            text = text + ("" if not text or text.endswith("\n") else "\n") + block
    return _bytes(text)


def _blocks(text: str, proposals: dict[str, proposals_format.Proposal]) -> dict[str, list[str]]:
    lines = text.split("\n")
    return {pid: [line.rstrip() for line in lines[p.line : p.end]] for pid, p in proposals.items()}


# --- the git driver ----------------------------------------------------------------------------------------------


def conflict_text(ours: bytes, theirs: bytes, conflicts: Sequence[str]) -> bytes:
    """What a conflicted file holds: both versions between git's markers, with what could not be merged."""
    why = "".join(f"# memd: {c}\n" for c in conflicts)
    end = b"" if not ours or ours.endswith(b"\n") else b"\n"
    tail = b"" if not theirs or theirs.endswith(b"\n") else b"\n"
    return b"<<<<<<< ours\n" + _bytes(why) + ours + end + b"=======\n" + theirs + tail + b">>>>>>> theirs\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 4 or args[0] not in KINDS:
        print(f"usage: python -m memd.merge_driver {{{','.join(KINDS)}}} BASE OURS THEIRS [PATH]", file=sys.stderr)
        return 2
    kind, base_path, ours_path, theirs_path = args[:4]
    base, ours, theirs = (Path(p).read_bytes() for p in (base_path, ours_path, theirs_path))
    result = merge(kind, base, ours, theirs)
    if result.clean:
        Path(ours_path).write_bytes(result.data)
        return 0
    shown = args[4] if len(args) > 4 else ours_path
    for c in result.conflicts:
        print(f"memd: {shown}: {c}", file=sys.stderr)
    Path(ours_path).write_bytes(conflict_text(ours, theirs, result.conflicts))
    return 1


if __name__ == "__main__":
    sys.exit(main())
