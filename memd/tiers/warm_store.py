"""The warm tier: daily append-only logs in `warm/`, their token counts and parsed entries.

Appends are planned here and made durable by the workspace (group commit: a batch's entries for one day become
one append and one fsync). Counts are incremental: memd counts what it appends, and what another tool appended
is counted from the old end of the file, so an append costs in proportion to its size, not the file's.
Imports memd.fsio, memd.tokens and the warm format.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from memd import fsio
from memd.errors import CorruptFile
from memd.tiers import WARM_DAY_MAX_BYTES, read_tier_file, warm_format
from memd.tiers.warm_format import WarmEntry
from memd.tokens import TokenCounter


@dataclass
class DayFile:
    fingerprint: fsio.Fingerprint | None
    tokens: int | None = None  # None: not counted yet (counted on first need)
    entries: list[WarmEntry] | None = field(default=None, repr=False)  # parsed lazily, extended on append
    ends_with_newline: bool | None = None  # None: unknown, read once when needed
    current: bool | None = None  # in the text-as-written format at its end (a zoned heading)? None: unknown


class WarmStore:
    def __init__(self, directory: Path, counter: TokenCounter, max_bytes: int = WARM_DAY_MAX_BYTES) -> None:
        self.directory = directory
        self.max_bytes = max_bytes  # [limits] warm_day_max_bytes: a bigger day file is skipped and reported
        self.errors: dict[date, str] = {}  # day files memd will not read (too large, not a regular file)
        self._counter = counter
        self.days: dict[date, DayFile] = {}
        self.version = 0  # bumped on every change, so derived figures (usage) can be cached
        self._last_path: tuple[date | None, Path] = (None, directory)
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
        seen: dict[date, fsio.Fingerprint] = {}
        try:
            with os.scandir(self.directory) as it:
                for entry in it:
                    day = warm_format.parse_day_filename(entry.name)
                    if day is None:
                        continue
                    st = entry.stat(follow_symlinks=False)
                    if stat.S_ISREG(st.st_mode):  # symlinks and other oddities are never ours to read or write
                        seen[day] = fsio.Fingerprint.of_stat(st)
        except FileNotFoundError:
            pass
        changed = False
        # A new dict swapped in whole: a scan may run in a worker thread (adoption) while the loop iterates `days`.
        days = dict(self.days)
        for day in list(days):
            if day not in seen and day != skip:
                del days[day]
                self.errors.pop(day, None)
                changed = True
        for day, fp in seen.items():
            if day == skip:
                continue
            known = days.get(day)
            if known is None:
                days[day] = DayFile(fp)
                changed = True
            elif known.fingerprint != fp:
                self._adopt_change(day, known, fp)
                changed = True
        if changed:
            self.days = days
            self.version += 1
        return changed

    def looks_changed(self) -> bool:
        """Would `scan` find anything new? Stat only, no reads, no change to what is known."""
        seen: dict[date, fsio.Fingerprint] = {}
        try:
            with os.scandir(self.directory) as it:
                for entry in it:
                    day = warm_format.parse_day_filename(entry.name)
                    if day is not None:
                        st = entry.stat(follow_symlinks=False)
                        if stat.S_ISREG(st.st_mode):
                            seen[day] = fsio.Fingerprint.of_stat(st)
        except FileNotFoundError:
            pass
        return seen != {day: known.fingerprint for day, known in self.days.items()}

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
        known.entries = None
        known.ends_with_newline = None
        known.fingerprint = fp
        self.version += 1

    def path_for(self, day: date) -> Path:
        if self._last_path[0] != day:  # every batch asks for today's path twice; pathlib joins are not free
            self._last_path = (day, self.directory / warm_format.day_filename(day))
        return self._last_path[1]

    def plan_append(self, day: date, rendered: Sequence[str], header: str) -> fsio.FileWrite:
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
        return fsio.FileWrite(self.path_for(day), data, append=True, expected_size=size)

    def _current_format(self, day: date, known: DayFile) -> bool:
        if known.current is None:
            data = self._read(day)
            if data is None:  # unreadable: the append fails on it anyway
                return True
            known.current = warm_format.is_current_format(data.decode("utf-8", "replace"))
        return known.current

    def _ends_with_newline(self, day: date, size: int) -> bool:
        return fsio.last_byte(self.path_for(day), size) == b"\n"

    def count_append(self, write: fsio.FileWrite) -> int:
        """The tokens an append adds (the workspace counts while the disk is busy with it)."""
        return self._counter.count(write.data.decode("utf-8"))

    def commit_append(
        self, day: date, fp: fsio.Fingerprint, write: fsio.FileWrite, entries: Sequence[WarmEntry], added: int
    ) -> None:
        """Record a durable append that added `added` tokens."""
        known = self.days.setdefault(day, DayFile(None, tokens=0))
        planned = (write.expected_size or 0) + len(write.data)
        if fp.size != planned:  # someone else appended around memd's append: count and parse the file again
            known.tokens = None
            known.entries = None
            known.ends_with_newline = None
            known.current = None
        else:
            known.current = True  # memd's append is in the current format, its heading written first if needed
            if known.tokens is not None:
                known.tokens += added
            if known.entries is not None:
                known.entries.extend(entries)
            known.ends_with_newline = write.data.endswith(b"\n")
        known.fingerprint = fp
        self.version += 1

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

    def entries_for(self, day: date) -> list[WarmEntry]:
        known = self.days.get(day)
        if known is None:
            return []
        if known.entries is None:
            data = self._read(day)
            if data is None:
                return []
            text = data.decode("utf-8", "replace")
            known.entries = warm_format.parse_day(text, self.zoneless_as_written)
            known.current = warm_format.is_current_format(text)
        return known.entries

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
