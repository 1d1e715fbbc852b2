"""A set of digests that grows all day at 8 bytes a digest: what a big day's parse keeps of the entries it lets go.

A Python set of 16-byte digests costs ~91 bytes a member, and a day of steady writes lets go of ~80,000
decisions and flushed notes an hour (the soak: ~7 MB an hour, most of its RSS bound). Here a digest is kept as
its first 8 bytes, an unsigned integer, in sorted arrays: the newest in a small set, merged into sorted runs
whose sizes halve from the first to the last (a binary counter: at most ~log2(n / RUN) + 1 runs, each member
merged that many times in all). A lookup is a set probe and a binary search per run.

Eight bytes tell a checkpoint's flush whether the day already holds an entry: a false match among n kept digests
has a chance of about n / 2**64 per lookup (5e-15 at 100,000), and costs one compressed note or decision not
logged again to warm, which the checkpoint's record and the snapshot before it still hold. Imports nothing from
memd.
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left

RUN = 2048  # the newest digests are a plain set until there are this many


class DigestSet:
    __slots__ = ("_recent", "_run", "_runs")

    def __init__(self, run: int = RUN) -> None:
        self._run = run
        self._recent: set[int] = set()
        self._runs: list[array[int]] = []  # each sorted; sizes strictly decreasing

    @staticmethod
    def _key(digest: bytes) -> int:
        return int.from_bytes(digest[:8], "big")

    def __len__(self) -> int:
        return len(self._recent) + sum(len(run) for run in self._runs)

    def __contains__(self, digest: object) -> bool:
        if not isinstance(digest, bytes):
            return False
        key = self._key(digest)
        if key in self._recent:
            return True
        for run in self._runs:
            i = bisect_left(run, key)
            if i < len(run) and run[i] == key:
                return True
        return False

    def add(self, digest: bytes) -> None:
        if digest in self:
            return
        self._recent.add(self._key(digest))
        if len(self._recent) < self._run:
            return
        run = array("Q", sorted(self._recent))
        self._recent = set()
        while self._runs and len(self._runs[-1]) <= len(run):
            # Streamed into the new array: sorting the two together made a Python int of every member first
            # (~48 bytes each, 29 MB at a peak for two runs of 262,144), a block the size of the day on the loop.
            run = array("Q", heapq.merge(self._runs.pop(), run))
        self._runs.append(run)
