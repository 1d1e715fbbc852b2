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
- `cold/MEMORY.md` (`cold`): learnings keyed by (category, text), each kept once, under their sections; a learning
  edited differently on both sides, or prose changed differently on both sides in one section, is a conflict
  (memd.merge_cold).
- the hot tier (`hot`): ours, unless ours is still the common ancestor's (this side's session has not changed
  since), then theirs. The hot tier is one machine's live session; the other version stays in the history (the
  merge commit's other parent), and the files on each machine stay that machine's (memd.sync).
- `cold/PROPOSED.md` (`proposed`): whole proposals (a learning line and its `  - key: value` lines) keyed by
  their id (memd.tiers.proposals_format): ours as it is, less the proposals theirs removed (accepted or rejected
  there) and ours left as they were, plus the proposals theirs added, each under its own section with all its
  lines. A proposal on both sides is kept once. Never a conflict.

Imports memd.merge_cold, memd.merge_common (`Merged`, bytes as text and back), memd.tiers.proposals_format and
the standard library only: git starts this module in a fresh process for every file it merges.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from memd.merge_cold import merge_cold
from memd.merge_common import Merged, as_bytes, as_text
from memd.tiers import proposals_format

KINDS = ("warm", "cold", "hot", "proposed")
_ENTRY = re.compile(r"### ([0-9]{2}:[0-9]{2}:[0-9]{2}) -(?: .*)?")
_DAY_HEADING = re.compile(r"# Activity Log [0-9]{4}-[0-9]{2}-[0-9]{2}\b.*")


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
    b, o, t = (_warm_blocks(as_text(x)) for x in (base, ours, theirs))
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
    return as_bytes("".join(block.key + "\n\n" for block in merged))


# --- cold/PROPOSED.md --------------------------------------------------------------------------------------------


def merge_proposed(base: bytes, ours: bytes, theirs: bytes) -> bytes:
    """Proposals of both sides by id (see the module docstring): ours' bytes, less the proposals theirs removed
    and ours kept as the ancestor had them, plus theirs' new ones inserted whole into their sections."""
    if ours == theirs or theirs == base:
        return ours
    if ours == base:
        return theirs
    text_b, text_o, text_t = as_text(base), as_text(ours), as_text(theirs)
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
    return as_bytes(text)


def _blocks(text: str, proposals: dict[str, proposals_format.Proposal]) -> dict[str, list[str]]:
    lines = text.split("\n")
    return {pid: [line.rstrip() for line in lines[p.line : p.end]] for pid, p in proposals.items()}


# --- the git driver ----------------------------------------------------------------------------------------------


def conflict_text(ours: bytes, theirs: bytes, conflicts: Sequence[str]) -> bytes:
    """What a conflicted file holds: both versions between git's markers, with what could not be merged."""
    why = "".join(f"# memd: {c}\n" for c in conflicts)
    end = b"" if not ours or ours.endswith(b"\n") else b"\n"
    tail = b"" if not theirs or theirs.endswith(b"\n") else b"\n"
    return b"<<<<<<< ours\n" + as_bytes(why) + ours + end + b"=======\n" + theirs + tail + b">>>>>>> theirs\n"


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
