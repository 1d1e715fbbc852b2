"""The cold tier's in-memory state and its file: `cold/MEMORY.md` text, what memd last saw on disk, tokens.

Learnings are inserted as text edits so that everything else in the file stays byte-for-byte as its author left
it. Token counts grow by the inserted line (incremental) and are recounted whenever the file is (re)read; the
parsed learnings take each insertion in without reading the file again (memd.tiers.cold_learnings). The blocks a
burst appends are held apart from the text until something needs it whole (`text`): a learning appended to a
2 MB MEMORY.md copies neither the file nor the run it joins. After a fold of a big file the store lets go of the
text the fold wrote (`Released`): a burst appends after it without reading it, and the next fold (or an edit that
needs the text) reads it back from the file, checked by its digest; the file changed outside memd meanwhile is an
outside change (fsio_batch.OutsideChange), read as a person's edit is.
A burst's fold is made as text by memd.tiers.cold_folds; what an edit adds to the count, by memd.tiers.cold_tokens.
Imports memd.fsio, memd.fsio_append, memd.fsio_batch, memd.tokens, memd.errors, the cold format, the cold
learnings, memd.tiers.cold_edits (which insertions led from one text to another), cold_folds and cold_tokens.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memd import fsio, fsio_append, fsio_batch
from memd.errors import Busy, CorruptFile
from memd.tiers import COLD_MAX_BYTES, cold_edits, cold_folds, cold_format, read_tier_file, read_tier_start
from memd.tiers.cold_folds import Fold, Head
from memd.tiers.cold_format import Learning
from memd.tiers.cold_learnings import Learnings
from memd.tiers.cold_tokens import appended_tokens, inserted_tokens, seam_start
from memd.tokens import TokenCounter

# A learning that comes within FLOOD_SECONDS of the last write of a fence-free MEMORY.md of APPEND_FROM_CHARS or
# more is appended at the end of the file in a block of its own (cold_format.append_learning_at) instead of
# inserted first under its section, which rewrites the whole file: under a burst of learnings (an agent writing
# many at once, a runaway loop) the bytes written and fsynced per learning stay the size of the learning, not of
# MEMORY.md. From the first append on (`run_start`) every learning is appended, whatever its timing, until a fold
# puts the run's learnings first under their sections (cold_format.fold_appended: what inserting them one by one
# makes), made in a worker (`prepare_fold`) and written like any batch. The workspace folds TIDY_AFTER_SECONDS
# after the last append, at once after APPENDED_MAX appends, before any other edit of the file, and at close.
APPEND_FROM_CHARS = 64 * 1024
FLOOD_SECONDS = 2.0
TIDY_AFTER_SECONDS = 2.0
APPENDED_MAX = 1000


@dataclass(frozen=True, slots=True)
class Released:
    """The start of MEMORY.md the store let go of after writing it (a fold's `Head`; a burst only appends after
    it): its length in characters, the size and digest of its bytes to check a read-back by, its end from
    `seam_start` on (what an append's count needs of it), whether it ends with a line end, and whether it is known
    to hold no fence marker. The text a burst's run held in memory goes from ~2 copies of MEMORY.md (the text and
    the learnings' arena) to one: ~39 bytes a learning, 1.4 MB an hour of the soak's bursts
    (torture/README.md)."""

    chars: int
    size: int
    digest: bytes
    seam: str
    ends_with_line_end: bool
    fence_free: bool


class ColdStore:
    def __init__(self, path: Path, counter: TokenCounter, max_bytes: int = COLD_MAX_BYTES) -> None:
        self.path = path
        self.max_bytes = max_bytes  # [limits] cold_max_bytes
        self._counter = counter
        # MEMORY.md as memd holds it is `_text` followed by `_tail`, the blocks a burst appended since it was last
        # needed whole (`text` joins them): a str cannot grow in place, and copying a 2 MB text per learning left
        # the heap holding holes the size of the file (torture/README.md, "What a learning costs in RSS").
        self._text = ""
        self._tail: list[str] = []
        self.released: Released | None = None  # `_text` let go of: read back when asked for (`text`)
        # A text read back in a worker is taken back on the loop, while an adoption may load the file in a worker
        # (Workspace.adopt): the two swaps of `_text` must not interleave.
        self._swap = threading.Lock()
        self._changed = False  # the file was found changed where its fingerprint did not tell (`found_changed`)
        self._tail_fence_free = True  # every block of `_tail` is known to hold no fence marker
        self.length = 0  # len(text), without joining it
        # A blake2b of text[start:] for the RUN_XATTR mark (`mark_for`), carried across appends: (start, hash).
        self._run_hash: tuple[int, Any] | None = None
        self.fingerprint: fsio.Fingerprint | None = None
        self.error: CorruptFile | None = None
        self.tokens = 0
        self._parsed: Learnings | None = None  # of `text`; None until a read asks
        self._fence_free_text: str | None = None  # a text known to hold no fence (cold_format.may_fence)
        self._raw: bytes | None = None  # the bytes `text` came from (or was written as): see `raw`
        self._raw_is_text = False  # `raw` is `text` encoded (after an append: not kept twice)
        self.last_write = -math.inf  # time.monotonic() of memd's last write of the file
        # Where in `text` the blocks a burst appended begin (see FLOOD_SECONDS), and how many there are: set by
        # memd's own appends, cleared by a fold, read from the text when the file is read (a daemon killed in a
        # burst leaves a run; an edit by hand may have folded it).
        self.run_start: int | None = None
        self.appended = 0

    @property
    def text(self) -> str:
        """The file's text as memd holds it (what it wrote, or read last): the blocks appended since it was last
        asked for are joined to it now, once. A start let go of (`released`) is read back first; the file no
        longer starting with it raises fsio_batch.OutsideChange (only a batch's plan asks then: its writer reads
        the file as a person's edit and plans again)."""
        released = self.released
        if released is not None and not self.take_back(released, self.read_back(released)):
            self.fingerprint = None  # whatever reads next reads the file as it is
            self._changed = True
            raise fsio_batch.OutsideChange(self.path)
        if self._tail:
            joined = "".join([self._text, *self._tail])
            if self._tail_fence_free and self._fence_free_text is self._text:
                self._fence_free_text = joined
            self._text = joined
            self._tail.clear()
            self._tail_fence_free = True
        return self._text

    def read_back(self, released: Released) -> str | None:
        """In any thread: the start of the file that `released` names, if the file still starts with exactly those
        bytes (None: changed outside memd, or gone)."""
        data = read_tier_start(self.path, released.size)
        if data is None or cold_folds.digest_of(data) != released.digest:
            return None
        return data.decode("utf-8")  # the bytes memd wrote from a str

    def take_back(self, released: Released, head: str | None) -> bool:
        """On the loop: hold `head`, read back for `released`, again. False when it could not be read back, or the
        store moved on meanwhile (it holds another text now)."""
        with self._swap:
            if head is None or self.released is not released:
                return False
            self.released = None
            self._text = head
            if released.fence_free:
                self._fence_free_text = head
            return True

    def found_changed(self) -> None:
        """A read-back found the file no longer starting with what memd wrote, while its fingerprint says nothing
        changed (a save of the same size within the clock's tick): the next `refresh` reads it, whatever memd's
        own appends meanwhile make of the fingerprint."""
        self._changed = True

    def _release(self, text: str, head: Head) -> None:
        """Let go of `head`, the start of `text` that a fold just wrote (`text` is it and the run after it)."""
        chars = len(head.text)
        seam = head.text[seam_start(head.text, chars) :]
        self.released = Released(chars, head.size, head.digest, seam, head.text.endswith("\n"), head.fence_free)
        self._text = ""
        self._tail = [text[chars:]] if len(text) > chars else []
        self._tail_fence_free = not cold_format.may_fence(head.text[-2:] + text[chars:])  # (and across the seam)
        self._fence_free_text = None
        self._raw, self._raw_is_text = None, True

    def _text_from(self, start: int) -> str | None:
        """`text[start:]` without reading a released start back; None when `start` lies in it."""
        released = self.released
        if released is None:
            return self.text[start:]
        if start < released.chars:
            return None
        return "".join(self._tail)[start - released.chars :]

    def _set_text(self, text: str) -> None:
        with self._swap:
            self.released = None
            self._text = text
        self._tail.clear()
        self._tail_fence_free = True
        self.length = len(text)
        self._run_hash = None

    def holds(self, text: str) -> bool:
        """Is `text` the very text the store holds (not a copy, not one with blocks appended after it)?"""
        return self.released is None and not self._tail and text is self._text

    def ends_with_line_end(self) -> bool:
        """Does the text end with "\n" (an empty one does not)? Without joining it."""
        if self._tail:
            return self._tail[-1].endswith("\n")
        if self.released is not None:
            return self.released.ends_with_line_end
        return self._text.endswith("\n")

    def reconfigure(self, max_bytes: int) -> None:
        """A reloaded [limits] cold_max_bytes: files read from now on are held to it."""
        self.max_bytes = max_bytes

    def load(self) -> None:
        self._changed = False
        self.fingerprint = fsio.fingerprint(self.path)
        try:
            data = read_tier_file(self.path, self.max_bytes)
        except CorruptFile as exc:
            self.error = exc
            return
        try:
            text = "" if data is None else data.decode("utf-8")
        except UnicodeDecodeError as exc:
            self._raw, self._raw_is_text = data, False
            self.error = CorruptFile(
                f"{self.path} is not valid UTF-8 ({exc.reason} at byte {exc.start}); fix it, memd will not rewrite it"
            )
            return
        tokens = self._counter.count(text)
        run_start = self._run_in(text)
        # The text and the bytes it came from change together (a plan must never pair the new base with old text).
        self._set_text(text)
        self._raw, self._parsed, self.tokens, self.error = data, None, tokens, None
        self._raw_is_text = False
        self.run_start, self.appended = run_start, 0 if run_start is None else text.count("\n## ", run_start)

    def _run_in(self, text: str) -> int | None:
        """Where the run of blocks memd appended begins in `text`, just read from the file: the run memd holds now
        when the text still ends with it (a person's save above it), else the one the file's RUN_XATTR names (a
        daemon stopped or killed in a burst: `mark_for`), when the text ends with exactly that run; else None. A
        person's own sections, however alike, are never taken for a run."""
        found: list[int] = []
        held = self.run_start
        run = self._text_from(held) if held is not None and self.length > held else None
        if run and text.endswith(run) and len(text) > len(run):
            found.append(len(text) - len(run))
        marked = run_named(text, fsio_append.run_mark(self.path))
        if marked is not None:  # a restored file's run may hold more than the one held (memd.snapshot_history)
            found.append(marked)
        return min(found, default=None)

    def file_run_mark(self) -> str | None:
        """The mark of the run the file holds now (its RUN_XATTR, as text), for a snapshot's commit to record: a
        restore of that commit marks the restored file with it (git keeps no extended attributes)."""
        mark = fsio_append.run_mark(self.path)
        return None if mark is None else mark.decode("ascii", "replace")

    def looks_changed(self) -> bool:
        """Did the file change outside memd? Stat only (or found so by a read-back: `found_changed`)."""
        return self._changed or fsio.fingerprint(self.path) != self.fingerprint

    def refresh(self) -> bool:
        if not self.looks_changed():
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
            try:
                text = self.text
            except fsio_batch.OutsideChange:  # (let go of only while parsed: `_release`, `commit_appends`)
                raise Busy(f"{self.path} changed outside memd as memd read it; retry: memd reads it again") from None
            parsed = Learnings.parse(text)
            if self.text is text:  # an adoption in a worker thread may have swapped the text meanwhile
                self._parsed = parsed
        return parsed

    def fence_free_now(self) -> bool:
        """`fence_free(self.text)`, without reading a released start back when it is known to hold no fence."""
        released = self.released
        if released is not None and released.fence_free and self._tail_fence_free:
            return True
        return self.fence_free(self.text)

    def flooding_now(self) -> bool:
        """`flooding(self.text)`, from its length."""
        return self.length >= APPEND_FROM_CHARS and time.monotonic() - self.last_write < FLOOD_SECONDS

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
        """Every learning in file order (made for each call: reads that need a few use `parsed.relevant`)."""
        return self.parsed.items

    @property
    def raw(self) -> bytes | None:
        """The bytes `text` came from, or was written as (None: no file): what a guarded replace expects there."""
        return self.text.encode("utf-8") if self._raw_is_text else self._raw

    def flooding(self, text: str) -> bool:
        """Is a learning added to `text` now part of a burst into a big file (see FLOOD_SECONDS)?"""
        return len(text) >= APPEND_FROM_CHARS and time.monotonic() - self.last_write < FLOOD_SECONDS

    @property
    def parsed_if_any(self) -> Learnings | None:
        """The learnings of `text` if a read parsed them already (nothing is parsed here)."""
        return self._parsed

    def prepare_fold(
        self, text: str, run_start: int, known: Learnings | None = None, tokens: int | None = None
    ) -> Fold | None:
        """In a worker: `text` with the blocks appended from `run_start` on folded back, counted and parsed
        (memd.tiers.cold_folds.prepare: `known`, the learnings the store holds; `tokens`, its count of `text`)."""
        return cold_folds.prepare(self._counter, text, run_start, known, tokens)

    def folded(self, fold: Fold, current: str, run_start: int | None) -> Fold | None:
        """On the loop: `fold` made good for `current`, the text now (memd.tiers.cold_folds.made_good)."""
        return cold_folds.made_good(self._counter, fold, current, run_start)

    def write_for(
        self, text: str, inserts: Sequence[tuple[str, int, str, str]] = (), run_start: int | None = None
    ) -> fsio_batch.FileWrite:
        """The write that makes the file `text`: an append of what `inserts` (a batch's, Draft.cold_inserts) added
        when each of them was at the end and they lead from the file as memd holds it to `text`, guarded by its
        fingerprint; otherwise a replace guarded by the bytes the current text came from (a person's `>>`
        meanwhile is not lost either way). Either is marked with the run `text` ends with, if any (`run_start`:
        `mark_for`)."""
        steps = cold_edits.chain(self.text, text, inserts)
        fp = self.fingerprint
        if steps and fp is not None and self.error is None and all(at == len(before) for before, at, _ in steps):
            added = text[len(self.text) :].encode("utf-8")
            mark = mark_for(text, run_start)
            return fsio_batch.FileWrite(
                self.path, added, append=True, guarded=True, expected_size=fp.size, expected_fingerprint=fp, mark=mark
            )
        data = text.encode("utf-8")
        return fsio_batch.FileWrite(
            self.path, data, append=False, guarded=True, expected=self.raw, mark=mark_for(text, run_start)
        )

    def commit(
        self,
        text: str,
        write: fsio_batch.FileWrite,
        fp: fsio.Fingerprint,
        inserts: Sequence[tuple[str, int, str, str]] = (),
        fold: Fold | None = None,
        run_start: int | None = None,
    ) -> None:
        """Record a durable write. Tokens grow by what each insertion added (lines, headings, preamble), and the
        parsed learnings by each learning inserted: `inserts` are a batch's insertions in order (Draft.learn), taken
        one at a time when they lead from the text memd held (or from `fold`'s, a fold the batch made first) to
        `text`; otherwise the edit is compared whole (one insertion found, or a recount and a parse on the next
        read). `run_start`: where the blocks a burst appended begin in `text` (Draft.cold_run_start)."""
        tokens, parsed = self.tokens, self._parsed
        if fold is not None:
            start, tokens, parsed = fold.text, fold.tokens, fold.parsed
            if parsed is not None and self._parsed is not None:
                parsed.take_lookups(self._parsed)
        elif self.released is not None:  # (a plan that edits the text reads it back first: never so) taken whole
            start, parsed = text, None
            tokens = self._counter.count(text)
        else:
            start = self.text
        steps = cold_edits.chain(start, text, inserts)
        if steps is None:
            at, added = cold_edits.insertion_point(start, text)
            steps = [(start, at, added)] if added else []
            if not added and text is not start:
                tokens += self._counter.count(text) - self._counter.count(start)
                parsed = None
        free = bool(steps) and self.fence_free(steps[0][0])
        for before, at, added in steps:
            tokens += inserted_tokens(self._counter, before, at, added)
            if parsed is not None:
                parsed = parsed.inserted(before, at, added, fence_free=free)
            free = free and not cold_format.may_fence_after(before, at, added)
        self._fence_free_text = text if free else None
        self._set_text(text)
        self.tokens = tokens
        if write.append:
            self._raw, self._raw_is_text = None, True
        else:
            self._raw, self._raw_is_text = write.data, False
        self.run_start = run_start if run_start is not None and run_start < len(text) else None  # (never empty)
        self.appended = 0 if self.run_start is None else text.count("\n## ", self.run_start)  # the run only: ~10 us
        self.fingerprint = fp
        self._parsed = parsed
        self.error = None
        self.last_write = time.monotonic()
        head = fold.head if fold is not None else None
        if head is not None and parsed is not None and not write.append and self._releasable(text, head.text):
            self._release(text, head)

    def _releasable(self, text: str, head: str) -> bool:
        """May the store let go of `head` once `text` is written? When the file is big, starts with `head` and
        holds nothing after it but the run a burst appends (what a fold of a burst leaves)."""
        if len(head) < APPEND_FROM_CHARS:
            return False
        if len(text) != len(head) and self.run_start != len(head):
            return False
        return text is head or text.startswith(head)

    def append_write(self, blocks: Sequence[str], run_start: int) -> fsio_batch.FileWrite:
        """The write that appends `blocks` (a batch's, Draft.cold_appends: what `append_learning_at` adds) to the
        file as memd holds it, the run they join beginning at `run_start`: an append guarded by the file's
        fingerprint, marked with the run (`mark_for`), made without joining the text."""
        added = "".join(blocks)
        fp = self.fingerprint
        if fp is None or self.error is not None:  # nothing to guard an append with: a replace of the whole text
            return self.write_for(self.text + added, (), run_start)
        return fsio_batch.FileWrite(
            self.path,
            added.encode("utf-8"),
            append=True,
            guarded=True,
            expected_size=fp.size,
            expected_fingerprint=fp,
            mark=f"{self.length + len(added) - run_start}:".encode() + self._run_hash_after(added, run_start)[1],
        )

    def commit_appends(
        self, blocks: Sequence[str], write: fsio_batch.FileWrite, fp: fsio.Fingerprint, run_start: int
    ) -> None:
        """Record a durable `append_write` of `blocks`: tokens and the parsed learnings grow by what they add, and
        the blocks are kept after the text, not joined to it."""
        if not write.append:  # append_write's replace: the text it wrote
            self.commit(self.text + "".join(blocks), write, fp, run_start=run_start)
            return
        added = "".join(blocks)
        self.tokens += self._appended_tokens(added)
        if self._parsed is not None:
            self._parsed = self._parsed.appended(self.length, self.ends_with_line_end(), added)
        # A block starts with "\n": no fence marker (three characters in a row) reaches across its seam.
        self._tail_fence_free = self._tail_fence_free and not cold_format.may_fence(added)
        hashed = self._run_hash_after(added, run_start)[0]
        self._tail.append(added)
        self.length += len(added)
        self._run_hash = (run_start, hashed)
        self._raw, self._raw_is_text = None, True
        self.appended = len(blocks) + (self.appended if self.run_start == run_start else 0)
        self.run_start = run_start
        self.fingerprint = fp
        self.error = None
        self.last_write = time.monotonic()
        released = self.released
        if self._parsed is None and released is not None and not self.take_back(released, self.read_back(released)):
            self._changed = True  # (never for memd's blocks) a read parses the text: it is read anew first

    def _run_hash_after(self, added: str, run_start: int) -> tuple[Any, bytes]:
        """The hash of the run from `run_start` once `added` is appended, and its digest (`mark_for`'s): the run
        held so far is hashed once, then carried from append to append."""
        if run_start >= self.length:  # the run begins in `added`
            hashed = hashlib.blake2b(digest_size=16)
            hashed.update(added[run_start - self.length :].encode("utf-8"))
        else:
            held = self._run_hash
            if held is None or held[0] != run_start:
                run = self._text_from(run_start)
                if run is None:
                    run = self.text[run_start:]
                held = (run_start, hashlib.blake2b(run.encode("utf-8"), digest_size=16))
                self._run_hash = held
            hashed = held[1].copy()
            hashed.update(added.encode("utf-8"))
        return hashed, hashed.hexdigest().encode()

    def _appended_tokens(self, added: str) -> int:
        """Tokens `added` adds at the end of the text, found from its last line without joining it."""
        released = self.released
        last = self._tail[-1] if self._tail else released.seam if released is not None else self._text
        start = seam_start(last, len(last))
        if start == 0 and self._tail:  # the seam began in an earlier piece (not a block memd appends)
            last = released.seam + "".join(self._tail) if released is not None else self.text
            start = seam_start(last, len(last))
        return appended_tokens(self._counter, last[start:], added)


def mark_for(text: str, run_start: int | None) -> bytes | None:
    """The fsio_append.RUN_XATTR of a MEMORY.md that is `text`, ending with a run of blocks memd appended from
    `run_start`: the run's length in characters, counted from the end (an edit above it does not move it), and a
    digest of it, so that only a file ending with exactly that run is taken for one (a person's section of the same
    shape, a mark left by an append that was cut off again, are not). ~0.1 ms for the longest run (APPENDED_MAX
    blocks)."""
    if run_start is None or run_start >= len(text):
        return None
    run = text[run_start:]
    return f"{len(run)}:".encode() + _digest(run)


def run_named(text: str, mark: bytes | None) -> int | None:
    """Where the run `mark` (`mark_for`'s) names begins in `text`: only when the text ends with exactly that run and
    the run is blocks as memd appends them; else None."""
    if mark is None:
        return None
    length, _, digest = mark.partition(b":")
    if not length.isdigit() or not 0 < int(length) < len(text):
        return None
    start = len(text) - int(length)
    run = text[start:]
    if _digest(run) != digest or cold_format.parse_appended(run) is None:
        return None
    return start


def _digest(run: str) -> bytes:
    return hashlib.blake2b(run.encode("utf-8"), digest_size=16).hexdigest().encode()
