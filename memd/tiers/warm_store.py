"""The warm tier: daily append-only logs in `warm/`, their token counts and parsed entries.

Appends are planned here and made durable by the workspace (group commit: a batch's entries for one day become
one append and one fsync). Counts are incremental: memd counts what it appends, and what another tool appended
is counted from the old end of the file, so an append costs in proportion to its size, not the file's.

Parsed entries are incremental too (warm_parse: memd's own append extends them, another tool's is parsed from the
last entry on). A read that must parse more than INLINE_PARSE_BYTES does so in a worker thread (`load`), so
one workspace's big day never holds the event loop; the result is taken only if nothing changed the day's parse
meanwhile. Bounds per workspace: of each day, only its newest warm_parse.DAY_WINDOW entries stay parsed (see
warm_parse); the parsed entries of at most PARSED_MAX_BYTES of day files (oldest days are dropped first; the day
being read stays); and the rendered text and token count of at most PIECES_MAX entries (the ones context payloads
rendered last).
Imports memd.fsio, memd.fsio_batch, memd.tokens, the warm format and warm_parse.
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from memd import fsio, fsio_batch
from memd.errors import CorruptFile
from memd.tiers import MIB, WARM_DAY_MAX_BYTES, read_tier_file, warm_format, warm_parse
from memd.tiers.digests import DigestSet
from memd.tiers.warm_format import WarmEntry
from memd.tiers.warm_parse import Job, Parsed, Result
from memd.tokens import TokenCounter

INLINE_PARSE_BYTES = 16 * 1024  # parsed on the loop (about a millisecond); more goes to a worker thread
PARSED_MAX_BYTES = 16 * MIB  # day-file bytes whose parsed entries a workspace keeps (about 4x that in memory)
PIECES_MAX = 4096  # entries whose rendered text and token count a workspace keeps
DAY_NAMES_CACHED = 4096  # warm/ file names whose parse a workspace keeps (emptied whole when full)


@dataclass
class DayFile:
    fingerprint: fsio.Fingerprint | None
    tokens: int | None = None  # None: not counted yet (counted on first need)
    parsed: Parsed | None = field(default=None, repr=False)  # None: not parsed (parsed on first need)
    ends_with_newline: bool | None = None  # None: unknown, read once when needed
    current: bool | None = None  # in the text-as-written format at its end (a zoned heading)? None: unknown
    generation: int = 0  # bumped when `parsed` is dropped: a worker's parse of an older generation is not taken

    @property
    def entries(self) -> list[WarmEntry] | None:
        return None if self.parsed is None else self.parsed.entries

    def forget(self) -> None:
        self.parsed = None
        self.generation += 1


class WarmStore:
    def __init__(self, directory: Path, counter: TokenCounter, max_bytes: int = WARM_DAY_MAX_BYTES) -> None:
        self.directory = directory
        self.max_bytes = max_bytes  # [limits] warm_day_max_bytes: a bigger day file is skipped and reported
        self.errors: dict[date, str] = {}  # day files memd will not read (too large, not a regular file)
        self._counter = counter
        self.days: dict[date, DayFile] = {}
        self._pieces: OrderedDict[tuple[date, int], tuple[WarmEntry, str, int]] = OrderedDict()
        self._loading: dict[date, tuple[Job, asyncio.Future[Result]]] = {}  # a worker parses this day for `load`
        self.version = 0  # bumped on every change, so derived figures (usage) can be cached
        self._last_path: tuple[date | None, Path] = (None, directory)
        self._day_names: dict[str, date | None] = {}  # file name -> its day (None: not a day file)
        # How to read a day file whose heading names no time zone: by memd's older escaping rule (a file memd wrote
        # before the zone was added), or as written (True: the workspace was adopted with day files, which other
        # tools, such as agents written after the article, write as text is).
        self.zoneless_as_written = False

    def reconfigure(self, max_bytes: int) -> None:
        """A reloaded [limits] warm_day_max_bytes: files read from now on are held to it."""
        self.max_bytes = max_bytes

    def scan(self, skip: date | None = None) -> bool:
        """Sync the day list with the directory (stat only; unchanged files are not read). True if anything changed.
        `skip`: a day whose file memd is appending to right now, left as it is known."""
        seen = self._listing()
        # Every read scans (an outside edit is seen at once, watcher or not), so the common case, nothing changed,
        # compares stat fields and allocates nothing.
        known_days = self.days
        gone = [day for day in known_days if day not in seen and day != skip]
        moved = [
            (day, st)
            for day, st in seen.items()
            if day != skip and not fsio.matches(known_days[day].fingerprint if day in known_days else None, st)
        ]
        if not gone and not moved:
            return False
        # A new dict swapped in whole: a scan may run in a worker thread (adoption) while the loop iterates `days`.
        days = dict(known_days)
        for day in gone:
            del days[day]
            self.errors.pop(day, None)
        for day, st in moved:
            fp = fsio.Fingerprint.of_stat(st)
            known = days.get(day)
            if known is None:
                days[day] = DayFile(fp)
            else:
                self._adopt_change(day, known, fp)
        self.days = days
        self.version += 1
        return True

    def looks_changed(self) -> bool:
        """Would `scan` find anything new? Stat only, no reads, no change to what is known."""
        seen, days = self._listing(), self.days
        return seen.keys() != days.keys() or any(not fsio.matches(days[d].fingerprint, st) for d, st in seen.items())

    def _listing(self) -> dict[date, os.stat_result]:
        """The stat of each day file (regular files only; symlinks and other oddities are never ours to read or
        write), by day: one scandir, one lstat per day file. Names are parsed once (`_day_names`)."""
        names, seen = self._day_names, {}
        try:
            with os.scandir(self.directory) as it:
                for entry in it:
                    name = entry.name
                    try:
                        day = names[name]
                    except KeyError:
                        if len(names) >= DAY_NAMES_CACHED:
                            names.clear()
                        day = names[name] = warm_format.parse_day_filename(name)
                    if day is None:
                        continue
                    st = entry.stat(follow_symlinks=False)
                    if stat.S_ISREG(st.st_mode):
                        seen[day] = st
        except FileNotFoundError:
            pass
        return seen

    def refresh_day(self, day: date) -> None:
        """Before appending: notice an outside change to this one day file (a single stat)."""
        fp = fsio.fingerprint(self.path_for(day))
        known = self.days.get(day)
        if fp is None:
            if self.days.pop(day, None) is not None:
                self.version += 1
        elif known is None:
            self.days[day] = DayFile(fp)
            self.version += 1
        elif known.fingerprint != fp:
            self._adopt_change(day, known, fp)

    def _adopt_change(self, day: date, known: DayFile, fp: fsio.Fingerprint) -> None:
        old = known.fingerprint
        appended = old is not None and fp.ino == old.ino and fp.size > old.size
        if not (appended and known.current):  # an append cannot take the format's heading away; a rewrite can
            known.current = None
        if appended and old is not None and known.tokens is not None:
            # Appended by someone else: count just the new bytes.
            added = self._read(day, offset=old.size)
            if added is None:
                known.tokens = None
            else:
                known.tokens += self._counter.count(added.decode("utf-8", "replace"))
        else:
            known.tokens = None
        if not appended:  # replaced or cut: parse it again; an append is parsed from the last entry on when read
            known.forget()
        known.ends_with_newline = None
        known.fingerprint = fp
        self.version += 1

    def path_for(self, day: date) -> Path:
        if self._last_path[0] != day:  # every batch asks for today's path twice; pathlib joins are not free
            self._last_path = (day, self.directory / warm_format.day_filename(day))
        return self._last_path[1]

    def plan_append(self, day: date, rendered: Sequence[str], header: str) -> fsio_batch.FileWrite:
        """One append of a batch's entries to a day file; `header` (warm_format.day_header) goes first in a new
        file, and before memd's first entry in a file from before the current format (or another tool's)."""
        known = self.days.get(day)
        prefix = ""
        if known is None or known.fingerprint is None or known.fingerprint.size == 0:
            prefix = header
        else:
            if known.ends_with_newline is None:
                known.ends_with_newline = self._ends_with_newline(day, known.fingerprint.size)
            if not known.ends_with_newline:  # another tool left the last line open: do not glue onto it
                prefix = "\n"
            if not self._current_format(day, known):
                prefix += header
        size = 0 if known is None or known.fingerprint is None else known.fingerprint.size
        data = (prefix + "".join(rendered)).encode("utf-8")
        if size + len(data) > self.max_bytes:  # memd would write a day file it then refuses to read
            raise OSError(
                errno.EFBIG,
                f"today's warm log would pass [limits] warm_day_max_bytes ({self.max_bytes} bytes); "
                "raise the cap or move the day file aside",
                str(self.path_for(day)),
            )
        return fsio_batch.FileWrite(self.path_for(day), data, append=True, expected_size=size)

    def _current_format(self, day: date, known: DayFile) -> bool:
        if known.current is None:
            data = self._read(day)
            if data is None:  # unreadable: the append fails on it anyway
                return True
            known.current = warm_format.is_current_format(data.decode("utf-8", "replace"))
        return known.current

    def _ends_with_newline(self, day: date, size: int) -> bool:
        return fsio.last_byte(self.path_for(day), size) == b"\n"

    def count_append(self, write: fsio_batch.FileWrite) -> int:
        """The tokens an append adds (the workspace counts while the disk is busy with it)."""
        return self._counter.count(write.data.decode("utf-8"))

    def commit_append(
        self, day: date, fp: fsio.Fingerprint, write: fsio_batch.FileWrite, entries: Sequence[WarmEntry], added: int
    ) -> None:
        """Record a durable append that added `added` tokens."""
        known = self.days.setdefault(day, DayFile(None, tokens=0))
        planned = (write.expected_size or 0) + len(write.data)
        if fp.size != planned:  # someone else appended around memd's append: count and parse the file again
            known.tokens = None
            known.forget()
            known.ends_with_newline = None
            known.current = None
        else:
            known.current = True  # memd's append is in the current format, its heading written first if needed
            if known.tokens is not None:
                known.tokens += added
            if known.parsed is not None and known.parsed.size == (write.expected_size or 0):
                warm_parse.extend(known.parsed, write.data, entries)
            known.ends_with_newline = write.data.endswith(b"\n")
        known.fingerprint = fp
        self.version += 1

    def counted_tokens(self, day: date) -> int | None:
        """The day's tokens as memd last counted them, without reading its file; None: not counted yet."""
        known = self.days.get(day)
        return 0 if known is None else known.tokens

    def tokens_for(self, day: date) -> int:
        known = self.days.get(day)
        if known is None:
            return 0
        if known.tokens is None:
            data = self._read(day)
            if data is None:
                return 0  # too large or unreadable: counted as nothing, reported in status
            text = data.decode("utf-8", "replace")
            known.tokens = self._counter.count(text)
            known.current = warm_format.is_current_format(text)
            self.version += 1
        return known.tokens

    def first_kept(self, day: date) -> int:
        """How many of a day's first entries are not in what `entries_for` and `load` return (see
        warm_parse.DAY_WINDOW)."""
        known = self.days.get(day)
        return 0 if known is None or known.parsed is None else known.parsed.first

    def let_go_identities(self, day: date) -> DigestSet:
        """The flush identities (flush_identities.flush_identity) of the day's entries that `entries_for` no longer
        holds; call it after `entries_for`, which parses the day."""
        known = self.days.get(day)
        return DigestSet() if known is None or known.parsed is None else known.parsed.let_go

    async def complete_let_go(self, day: date) -> None:
        """Add to the day's `let_go_identities` those of the entries its first parse never read (a big day's newest
        only: warm_parse.Parsed.head), parsed in a worker thread; what a checkpoint's flush looks up. Call it after
        `load`."""
        known = self.days.get(day)
        parsed = None if known is None else known.parsed
        if known is None or parsed is None or parsed.head == 0:
            return
        generation, head = known.generation, parsed.head
        found = await asyncio.get_running_loop().run_in_executor(None, self._head_identities, day, parsed)
        if found is None or known.parsed is not parsed or known.generation != generation or parsed.head != head:
            return  # changed meanwhile: the next parse starts again (and its head is completed by the next flush)
        for identity in found:
            parsed.let_go.add(identity)
        parsed.head = 0

    def _head_identities(self, day: date, parsed: Parsed) -> list[bytes] | None:
        """In a worker: warm_parse.head_identities of the file's first `parsed.head` bytes, or None when the file no
        longer holds what `parsed` was parsed from (replaced, cut, rewritten)."""
        try:
            data = read_tier_file(self.path_for(day), self.max_bytes)
        except CorruptFile:
            return None
        offset = parsed.resume.offset
        if data is None or data[offset : offset + len(parsed.tail)] != parsed.tail:
            return None
        return warm_parse.head_identities(data[: parsed.head], self.zoneless_as_written)

    def entries_for(self, day: date) -> list[WarmEntry]:
        """A day's newest entries (warm_parse.DAY_WINDOW at least, `first_kept` tells where they start), parsed here
        as far as the file has grown (an async caller uses `load`)."""
        known = self.days.get(day)
        if known is None:
            return []
        for _ in range(3):
            job = self._job(day)
            if job is None:
                break
            self._take(job, self._parse(job, whole_if_rewritten=True))
        return known.entries or []

    async def load_all(self, day: date) -> list[WarmEntry]:
        """Every entry of a day: what `load` returns, or, when the oldest were let go (warm_parse.DAY_WINDOW), the
        whole file parsed in a worker thread, kept by nobody."""
        entries = await self.load(day)
        known = self.days.get(day)
        if known is None or known.parsed is None or known.parsed.first == 0 or known.fingerprint is None:
            return entries
        job = Job(day, known, known.generation, None, 0, known.fingerprint.size)
        result = await asyncio.get_running_loop().run_in_executor(None, self._parse, job, True)
        if result.resume is None:  # unreadable now, or cut or replaced meanwhile: what is kept is all there is
            return entries
        return result.entries

    async def load(self, day: date) -> list[WarmEntry]:
        """A day's newest entries (as `entries_for`), parsed as far as the file has grown; more than
        INLINE_PARSE_BYTES to parse is parsed in a worker thread (readers of the same day share it) while the loop
        serves others. Every request that was acknowledged before this call is in what it returns."""
        for _ in range(4):
            job = self._job(day)
            if job is None:
                break
            if job.bytes <= INLINE_PARSE_BYTES:
                self._take(job, self._parse(job, whole_if_rewritten=False))
                continue
            loading = self._loading.get(day)
            pending = loading[1] if loading is not None and loading[0].same_start(job) else self._start(job)
            await asyncio.shield(pending)
        return self.entries_for(day)

    def _start(self, job: Job) -> asyncio.Future[Result]:
        pending = asyncio.get_running_loop().run_in_executor(None, self._parse, job, True)
        self._loading[job.day] = (job, pending)

        def done(finished: asyncio.Future[Result]) -> None:
            if self._loading.get(job.day, (None, None))[1] is finished:
                del self._loading[job.day]
            if not finished.cancelled() and finished.exception() is None:
                self._take(job, finished.result())

        pending.add_done_callback(done)  # before any reader's: the parse is taken before they resume
        return pending

    def _job(self, day: date) -> Job | None:
        """What is left to parse of a day file, or None when its entries are up to date."""
        known = self.days.get(day)
        return None if known is None else warm_parse.job_for(day, known)

    def _parse(self, job: Job, whole_if_rewritten: bool) -> Result:
        """Read and parse what `job` names (warm_parse.parse). Touches no state: it may run in a worker thread."""
        return warm_parse.parse(self.directory, self.max_bytes, self.zoneless_as_written, job, whole_if_rewritten)

    def _take(self, job: Job, result: Result) -> None:
        """Take a parse into the day's entries, unless the day changed since the job was made."""
        known = job.known
        if self.days.get(job.day) is not known or not job.still_applies():
            return
        if result.error is not None:
            self.errors[job.day] = result.error
            known.forget()
            return
        self.errors.pop(job.day, None)
        if result.rewritten or (result.whole and job.parsed is not None):
            # Changed before its last entry yet grown like an append (rewritten in place): counted again too.
            known.tokens = None
            self.version += 1
        if result.rewritten:
            known.forget()
            return
        parsed = warm_parse.advance(job, result)
        if parsed is None:
            return
        known.parsed = parsed
        self._trim(job.day)

    def _trim(self, keep: date) -> None:
        """Drop the parsed entries of the oldest days until what is kept is within PARSED_MAX_BYTES of day files
        (the day just parsed stays)."""
        total = sum(k.parsed.size for k in self.days.values() if k.parsed is not None)
        for day in sorted(self.days):
            if total <= PARSED_MAX_BYTES:
                return
            known = self.days[day]
            if day != keep and known.parsed is not None:
                total -= known.parsed.size
                known.forget()

    def piece(self, day: date, index: int, entry: WarmEntry) -> tuple[str, int]:
        """Entry `index` of a day rendered as the context payload shows it, and its token count: each counted once
        (kept while it is among the PIECES_MAX rendered last: the payload's window only moves to newer entries)."""
        key = (day, index)
        cached = self._pieces.get(key)
        if cached is not None and cached[0] is entry:
            return cached[1], cached[2]
        text = warm_format.render_entry(entry)
        cost = self._counter.count(text)
        self._pieces[key] = (entry, text, cost)
        if len(self._pieces) > PIECES_MAX:
            self._pieces.popitem(last=False)
        return text, cost

    def _read(self, day: date, offset: int = 0) -> bytes | None:
        """A day file's bytes through the tier reader (capped, no symlinks); None, with the reason kept in
        `errors` for status, when memd will not read it. A day that reads again is cleared."""
        try:
            data = read_tier_file(self.path_for(day), self.max_bytes, offset) or b""
        except CorruptFile as exc:
            self.errors[day] = exc.message
            return None
        self.errors.pop(day, None)
        return data

    def recent_days(self, today: date, count: int) -> list[date]:
        """The newest `count` calendar days up to today that have a file, newest first."""
        return sorted((d for d in self.days if 0 <= (today - d).days < count), reverse=True)
