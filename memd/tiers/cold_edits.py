"""Which insertions led from one `cold/MEMORY.md` text to another: a batch's recorded chain of insertions
(`chain`), or the one insertion found by comparing the two texts (`insertion_point`). The cold store carries its
token count and parsed learnings across exactly these, instead of counting and parsing the new text whole
(memd.tiers.cold_store). Pure: no I/O. Imports the standard library only.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence


def chain(start: str, end: str, inserts: Sequence[tuple[str, int, str, str]]) -> list[tuple[str, int, str]] | None:
    """The insertions (text before, where, what) that lead from `start` to `end`, when `inserts` is such a chain
    (each starting from the text the one before led to); None when it is not (no insertion recorded, an edit
    other than an insertion in between, a request's edit undone)."""
    if not inserts or inserts[0][0] is not start or inserts[-1][3] is not end:
        return None
    for (_, _, _, after), (before, _, _, _) in itertools.pairwise(inserts):
        if after is not before:
            return None
    return [(before, at, added) for before, at, added, _ in inserts]


def insertion_point(old: str, new: str) -> tuple[int, str]:
    """Where `new` differs from `old` and what was inserted there ("" when it is not a pure insertion)."""
    grown = len(new) - len(old)
    if grown <= 0:
        return 0, ""
    lo, hi = 0, len(old)  # binary search for the longest common prefix, comparing slices in C
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if new[:mid] == old[:mid]:
            lo = mid
        else:
            hi = mid - 1
    if new[lo + grown :] != old[lo:]:
        return 0, ""
    return lo, new[lo : lo + grown]
