"""The cold tier's in-memory state and its file: `cold/MEMORY.md` text, what memd last saw on disk, tokens.

Learnings are inserted as text edits so that everything else in the file stays byte-for-byte as its author left
it. Token counts grow by the inserted line (incremental) and are recounted whenever the file is (re)read; the
parsed learnings take each insertion in without reading the file again (memd.tiers.cold_learnings).
Imports memd.fsio, memd.fsio_batch, memd.tokens, memd.errors and the cold format.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

from memd import fsio, fsio_batch
from memd.errors import CorruptFile
from memd.tiers import COLD_MAX_BYTES, cold_format, read_tier_file
from memd.tiers.cold_format import Learning
from memd.tiers.cold_learnings import Learnings
from memd.tokens import TokenCounter


class ColdStore:
    def __init__(self, path: Path, counter: TokenCounter, max_bytes: int = COLD_MAX_BYTES) -> None:
        self.path = path
        self.max_bytes = max_bytes  # [limits] cold_max_bytes
        self._counter = counter
        self.text = ""
        self.fingerprint: fsio.Fingerprint | None = None
        self.error: CorruptFile | None = None
        self.tokens = 0
        self._parsed: Learnings | None = None  # of `text`; None until a read asks
        self._fence_free_text: str | None = None  # a text known to hold no fence (cold_format.may_fence)
        self.raw: bytes | None = None  # the bytes `text` came from (or was written as): what a publish expects there

    def reconfigure(self, max_bytes: int) -> None:
        """A reloaded [limits] cold_max_bytes: files read from now on are held to it."""
        self.max_bytes = max_bytes

    def load(self) -> None:
        self.fingerprint = fsio.fingerprint(self.path)
        try:
            data = read_tier_file(self.path, self.max_bytes)
        except CorruptFile as exc:
            self.error = exc
            return
        try:
            text = "" if data is None else data.decode("utf-8")
        except UnicodeDecodeError as exc:
            self.raw = data
            self.error = CorruptFile(
                f"{self.path} is not valid UTF-8 ({exc.reason} at byte {exc.start}); fix it, memd will not rewrite it"
            )
            return
        tokens = self._counter.count(text)
        # The text and the bytes it came from change together (a plan must never pair the new base with old text).
        self.text, self.raw, self._parsed, self.tokens, self.error = text, data, None, tokens, None

    def refresh(self) -> bool:
        if fsio.fingerprint(self.path) == self.fingerprint:
            return False
        self.load()
        return True

    def require_valid(self) -> None:
        if self.error is not None:
            raise CorruptFile(self.error.message, data={"path": str(self.path), "tier": "cold"})

    @property
    def parsed(self) -> Learnings:
        """The learnings of `text`, with the lookups reads make (memd.tiers.cold_learnings)."""
        parsed = self._parsed
        if parsed is None:
            text = self.text
            parsed = Learnings.parse(text)
            if self.text is text:  # an adoption in a worker thread may have swapped the text meanwhile
                self._parsed = parsed
        return parsed

    def fence_free(self, text: str) -> bool:
        """`not cold_format.may_fence(text)`, looked at once for the store's text and carried across memd's own
        insertions (none adds a fence), not once per `cold.learn` (~2.5 ms for a 2 MB MEMORY.md)."""
        if text is self._fence_free_text:
            return True
        free = not cold_format.may_fence(text)
        if free and text is self.text:
            self._fence_free_text = text
        return free

    @property
    def learnings(self) -> list[Learning]:
        """Every learning in file order (do not change the list: it is kept)."""
        return self.parsed.items

    def write_for(self, text: str) -> fsio_batch.FileWrite:
        """A replace guarded by the bytes the current text came from (a person's `>>` meanwhile is not lost)."""
        return fsio_batch.FileWrite(self.path, text.encode("utf-8"), append=False, guarded=True, expected=self.raw)

    def commit(
        self,
        text: str,
        write: fsio_batch.FileWrite,
        fp: fsio.Fingerprint,
        inserts: Sequence[tuple[str, int, str, str]] = (),
    ) -> None:
        """Record a durable rewrite. Tokens grow by what each insertion added (lines, headings, preamble), and the
        parsed learnings by each learning inserted: `inserts` are a batch's insertions in order (Draft.learn), taken
        one at a time when they lead from the text memd held to `text`; otherwise the edit is compared whole
        (one insertion found, or a recount and a parse on the next read)."""
        steps = _chain(self.text, text, inserts)
        parsed = self._parsed
        if steps is None:
            at, added = insertion_point(self.text, text)
            steps = [(self.text, at, added)] if added else []
            if not added:
                self.tokens += self._counter.count(text) - self._counter.count(self.text)
                parsed = None
        free = bool(steps) and self.fence_free(steps[0][0])
        for before, at, added in steps:
            self.tokens += self._inserted_tokens(before, at, added)
            if parsed is not None:
                parsed = parsed.inserted(before, at, added, fence_free=free)
            free = free and not cold_format.may_fence_after(before, at, added)
        self._fence_free_text = text if free else None
        self.text = text
        self.raw = write.data
        self.fingerprint = fp
        self._parsed = parsed
        self.error = None

    def _inserted_tokens(self, old: str, at: int, added: str) -> int:
        """Tokens an insertion of `added` at `at` into `old` added, counted with the neighbouring lines so merges at
        the seams (a blank line next to a new section) come out exactly as a full recount would."""
        before = old[old.rfind("\n", 0, max(at - 1, 0)) + 1 : at]
        end = old.find("\n", at)
        after = old[at : len(old) if end < 0 else end + 1]
        return self._counter.count(before + added + after) - self._counter.count(before + after)


def _chain(start: str, end: str, inserts: Sequence[tuple[str, int, str, str]]) -> list[tuple[str, int, str]] | None:
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
