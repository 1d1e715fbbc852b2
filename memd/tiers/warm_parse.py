"""The warm tier's incremental parse of day files: what is parsed of a day, a parse to do, and its result.

Parsed entries are incremental, since day files only grow: memd's own append extends them with what it wrote
(nothing is read back: `extend`), another tool's append is read and parsed from the last entry on
(warm_format.Resume), and only a file that was replaced, truncated, or changed before that last entry (its bytes
there differ) is parsed again from the start. `parse` touches no state, so the store may run it in a worker
thread; `advance` takes its result into the day's parse. Bounds: of each day, only its newest DAY_WINDOW entries
stay parsed (the older ones are final: a read that reaches them, a page of `warm.recent` or a whole `warm.day`,
parses the file in a worker and keeps nothing of it: WarmStore.load_all; of the entries let go, only 8 bytes of
the digest of each decision and flushed note are kept, for a checkpoint's flush: memd.tiers.digests). A first
parse of a file over NEWEST_ONLY_FROM_BYTES reads its newest DAY_WINDOW entries only (the lines before them are
only looked at: `window_start`); the digests of the entries before them are added when a checkpoint's flush first
needs them (`head_identities`, in a worker). So memory
hardly grows with the day: an agent that logs all day long made memd hold about 7 bytes for every byte of its day file.
Imports memd.errors, the tier reader, the warm format, memd.tiers.flush_identities and memd.tiers.digests (and,
for types only, the warm store's DayFile).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING

from memd.errors import CorruptFile
from memd.tiers import flush_identities, read_tier_file, warm_format
from memd.tiers.digests import DigestSet
from memd.tiers.warm_format import Resume, WarmEntry

if TYPE_CHECKING:
    from memd.tiers.warm_store import DayFile

# A day's newest entries kept parsed (about 300 KiB of a day file, ~1.5 MB in memory; a context payload's warm
# budget holds a few hundred at most, a `warm.recent` page 100)...
DAY_WINDOW = 2048
DAY_WINDOW_SLACK = 512  # ...once this many more have come, the oldest are let go in one move
# The first parse of a day file bigger than this reads its newest DAY_WINDOW entries only (`window_start`): a
# daemon started on a 36 MB day parsed it whole, ~1.4 s of a worker holding the GIL and ~200 MB at its peak, per
# workspace, while every client waited on the loop's share of the GIL. What is before them is only counted.
NEWEST_ONLY_FROM_BYTES = 1 << 20


@dataclass
class Parsed:
    """A day file's entries as parsed from its first `size` bytes, less its first `first` entries (let go: see
    DAY_WINDOW); `tail` holds its bytes from `resume.offset` to `size`, which an append by someone else must leave
    as they are. `resume.entries` counts from the file's first entry."""

    entries: list[WarmEntry]
    size: int
    resume: Resume
    tail: bytes
    first: int = 0
    # What a checkpoint's flush looks up of the entries let go (flush_identities.flush_identity: the decisions and
    # flushed notes among them, 16 bytes each): it must not log again what the day already holds.
    let_go: DigestSet = field(default_factory=DigestSet)
    # The file's first `head` bytes hold entries never parsed (a first parse of the newest only): their flush
    # identities are not in `let_go` until `head_identities` of them are added (WarmStore.complete_let_go).
    head: int = 0

    def cut_to_window(self) -> None:
        """Let go of the oldest entries beyond DAY_WINDOW (only final ones: before `resume`)."""
        excess = len(self.entries) - DAY_WINDOW
        if excess < DAY_WINDOW_SLACK:
            return
        drop = min(excess, self.resume.entries - self.first)
        if drop > 0:
            for entry in self.entries[:drop]:
                identity = flush_identities.entry_flush_identity(entry)
                if identity is not None:
                    self.let_go.add(identity)
            del self.entries[:drop]
            self.first += drop

    def replace_from_resume(self, entries: Sequence[WarmEntry]) -> None:
        del self.entries[max(0, self.resume.entries - self.first) :]
        self.entries.extend(entries)


@dataclass(frozen=True)
class Job:
    """Parse a day file's bytes `start` to `size`, continuing `parsed` (None: the whole file)."""

    day: date
    known: DayFile
    generation: int
    parsed: Parsed | None
    start: int
    size: int
    resume: Resume | None = None  # parsed.resume when the job was made: a parse advanced since is not continued
    newest_only: bool = False  # a first parse may read only the newest entries of a big file (window_start)

    @property
    def bytes(self) -> int:
        return self.size - self.start

    def same_start(self, other: Job) -> bool:
        """Does `other` continue the same parse (a worker's result for this job is then one for it too)?"""
        return (
            self.known is other.known
            and self.generation == other.generation
            and self.parsed is other.parsed
            and self.resume is other.resume
        )

    def still_applies(self) -> bool:
        """Is the day's parse still the one this job continues (not dropped, not advanced by another parse)?"""
        parsed = self.known.parsed
        return (
            self.known.generation == self.generation
            and parsed is self.parsed
            and (parsed is None or parsed.resume is self.resume)
        )


@dataclass(frozen=True)
class Result:
    entries: list[WarmEntry] = field(default_factory=list)
    resume: Resume | None = None  # None: nothing to take (the file shrank meanwhile, or could not be read)
    tail: bytes = b""
    whole: bool = False  # parsed from the start of the file: the entries replace every known one
    error: str | None = None
    rewritten: bool = False  # the bytes before the append differ: parse the whole file again
    first: int = 0  # entries before the first one parsed (a parse of the newest only)
    head: int = 0  # where the first one parsed starts in the file


def job_for(day: date, known: DayFile) -> Job | None:
    """What is left to parse of a day file, or None when its entries are up to date."""
    if known.fingerprint is None:
        return None
    size, parsed = known.fingerprint.size, known.parsed
    if parsed is not None and parsed.size >= size:
        return None
    if parsed is None:
        return Job(day, known, known.generation, None, 0, size, newest_only=True)
    return Job(day, known, known.generation, parsed, parsed.resume.offset, size, parsed.resume)


def parse(directory: Path, max_bytes: int, zoneless_as_written: bool, job: Job, whole_if_rewritten: bool) -> Result:
    """Read and parse what `job` names, in `directory`. Touches no state: it may run in a worker thread."""
    try:
        data = read_tier_file(directory / warm_format.day_filename(job.day), max_bytes, job.start) or b""
    except CorruptFile as exc:
        return Result(error=exc.message)
    data = data[: job.bytes]  # what memd is appending right now is taken when it is published
    if len(data) < job.bytes:  # cut or replaced since it was looked at: the next scan sees it
        return Result()
    if job.parsed is not None and not data.startswith(job.parsed.tail):
        if not whole_if_rewritten:
            return Result(rewritten=True)
        whole = Job(job.day, job.known, job.generation, None, 0, job.size)
        return parse(directory, max_bytes, zoneless_as_written, whole, whole_if_rewritten)
    if job.parsed is None and job.newest_only and len(data) > NEWEST_ONLY_FROM_BYTES:
        window = window_start(data, zoneless_as_written)
        if window is not None:  # the file's bytes before it are only looked at, not parsed
            entries, resume = warm_format.parse_day_bytes(data[window.offset :], window, zoneless_as_written)
            tail = data[resume.offset :]
            return Result(entries, resume, tail, whole=True, first=window.entries, head=window.offset)
    resume_at = None if job.parsed is None else job.parsed.resume
    entries, resume = warm_format.parse_day_bytes(data, resume_at, zoneless_as_written)
    return Result(entries, resume, data[resume.offset - job.start :], whole=job.parsed is None)


# An entry line (warm_format.is_entry_line) at a line start in a day file's bytes, its line break included: the
# same lines, since decoding never makes or removes an LF or a CR, and a CR before the LF is no part of the line.
_ENTRY_LINE = re.compile(rb"### [0-9]{2}:[0-9]{2}:[0-9]{2} -(?: [^\n]*)?\r?(?:\n|\Z)")
_BOM = b"\xef\xbb\xbf"
# What the heading line of an entry with a flush identity holds (flush_identities.flush_identity: its action starts so,
# and an action's first characters are on its heading line in every form it is written in).
_FLUSHABLE = (b"decision: ", flush_identities.FLUSHED_NOTE.encode())


def _line_starts(data: bytes, prefix: bytes, end: int) -> list[int]:
    """Where the lines of data[:end] that begin with `prefix` start (a BOM before the first one skipped)."""
    found = [len(_BOM)] if data.startswith(_BOM + prefix) else [0] if data.startswith(prefix) else []
    at = data.find(b"\n" + prefix, 0, end)
    while at >= 0:
        found.append(at + 1)
        at = data.find(b"\n" + prefix, at + 1, end)
    return [start for start in found if start < end]


def _entry_lines(data: bytes, end: int) -> list[int]:
    """Where the entry lines of data[:end] start (the last one's line break may be past `end`)."""
    return [start for start in _line_starts(data, b"### ", end) if _ENTRY_LINE.match(data, start)]


def _zoned_headings(data: bytes, end: int) -> list[int]:
    """Where the zoned day headings (warm_format.is_zoned_heading) of data[:end] start."""
    found = []
    for start in _line_starts(data, b"# Activity Log", end):
        stop = data.find(b"\n", start)
        line = data[start : len(data) if stop < 0 else stop].decode("utf-8", "replace").removesuffix("\r")
        if warm_format.is_zoned_heading(line):
            found.append(start)
    return found


def window_start(data: bytes, zoneless_as_written: bool) -> Resume | None:
    """Where a parse of a whole day file's newest DAY_WINDOW entries starts: the line of the DAY_WINDOW-th entry
    from the end (its heading line complete), how many entries come before it and the reading rule there, found by
    looking only at the lines that may start an entry or a zoned heading. What parse_day_bytes returns from there
    is exactly what a parse of the whole file gives for those entries (an entry line always starts an entry,
    inside a fence too, and a zoned heading switches the rule wherever it is). None: the file holds fewer."""
    # Complete lines only: a last line without its line break may yet become part of the entry above it.
    entry_lines = _entry_lines(data, data.rfind(b"\n") + 1)
    if len(entry_lines) <= DAY_WINDOW:
        return None
    offset = entry_lines[-DAY_WINDOW]
    current = zoneless_as_written or bool(_zoned_headings(data, offset))
    return Resume(offset, len(entry_lines) - DAY_WINDOW, current, current)


def head_identities(data: bytes, zoneless_as_written: bool) -> list[bytes]:
    """The flush identities (flush_identities.flush_identity) of the entries of a day file's first bytes, `data`: the
    head a parse of the newest only left out (Parsed.head), in file order. Only the entries whose heading line
    may give one are parsed (a decision or a flushed note: ~1 in 200 of the soak's 36 MB day), each alone, from
    its line to the next entry line, by the rule in effect there."""
    found: list[bytes] = []
    starts = _entry_lines(data, len(data))
    zoned = _zoned_headings(data, len(data))
    for k, start in enumerate(starts):
        stop = data.find(b"\n", start)
        heading = data[start : len(data) if stop < 0 else stop]
        if not any(mark in heading for mark in _FLUSHABLE):
            continue
        end = starts[k + 1] if k + 1 < len(starts) else len(data)
        current = zoneless_as_written or (bool(zoned) and zoned[0] < start)
        entries, _ = warm_format.parse_day_bytes(data[start:end], Resume(start, k, current, current))
        identity = flush_identities.entry_flush_identity(entries[0])
        if identity is not None:
            found.append(identity)
    return found


def advance(job: Job, result: Result) -> Parsed | None:
    """The day's parse with `result` taken in (a new one when parsed whole, else `job.parsed` continued), cut to
    DAY_WINDOW; None: nothing to take. The caller has checked that the job still applies."""
    if result.resume is None:
        return None
    size = job.size
    if result.whole or job.parsed is None:
        parsed = Parsed(result.entries, size, result.resume, result.tail, first=result.first, head=result.head)
    else:
        parsed = job.parsed
        parsed.replace_from_resume(result.entries)
        parsed.size, parsed.resume, parsed.tail = size, result.resume, result.tail
    parsed.cut_to_window()
    return parsed


def extend(parsed: Parsed, data: bytes, entries: Sequence[WarmEntry]) -> None:
    """Take memd's own append into the parse from what was written, without reading the file. Its entries
    parse back exactly as they were rendered (the format's promise) when they are read by the text-as-written
    rule: the file was in that format at its end, or the append starts with the day heading that says so.
    Otherwise the append is parsed from memory, from the last entry on."""
    first = data.find(b"### ")
    last = data.rfind(b"\n### ") + 1  # memd's entries have no other line starting so (keys are escaped)
    current = parsed.resume.at_end or b"# Activity Log" in data[: max(first, 0)]
    if entries and first >= 0 and current and data.startswith(b"### ", last):
        parsed.entries.extend(entries)
        parsed.resume = Resume(parsed.size + last, parsed.first + len(parsed.entries) - 1, True, True)
        parsed.tail = data[last:]
    else:
        added, resume = warm_format.parse_day_bytes(parsed.tail + data, parsed.resume)
        parsed.replace_from_resume(added)
        parsed.tail = (parsed.tail + data)[resume.offset - parsed.resume.offset :]
        parsed.resume = resume
    parsed.size += len(data)
    parsed.cut_to_window()
