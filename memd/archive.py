"""Monthly archives of expired warm days: `warm/archive/YYYY-MM.md.gz`, written whole and verified, read with a cap.

Each archived day is its own gzip member (so `zcat` shows the month), headed by a marker line with the day's
name, SHA-256 and byte length. An archive is never appended to in place: its bytes plus the new members are
written beside it, fsynced, read back and verified (every old member intact, every new one there), and only then
renamed over it. An archive that does not read back whole (a damaged byte, a torn member, a member that is not
memd's) is reported and left exactly as it is: new days go to the next file of the month (`YYYY-MM.1.md.gz`,
`.2`, ...), only the last file of a month is ever added to, and readers look at all of them (the intact members
of a damaged file, before and after the damage, stay readable). Decompression is streamed member by member and
capped (`warm.archive_max_bytes` per file, garbage tried and failed included): past the cap is an error, so a
gzip bomb costs at most the cap in memory and time; an archive is never grown past the cap (the next file
starts instead). Which days go, and deleting them afterwards, is memd.retention's part.
Imports memd.fsio, memd.errors and the warm format.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import hashlib
import os
import re
import stat
import zlib
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from memd import fsio
from memd.errors import CorruptFile, MemdError, StorageError
from memd.tiers import warm_format

ARCHIVE_DIR = "archive"
DEFAULT_ARCHIVE_MAX_BYTES = 64 << 20
_MARKER = re.compile(rb"<!-- memd-archive: (\d{4}-\d{2}-\d{2}\.md) sha256=([0-9a-f]{64}) bytes=(\d+) -->\n")
_ARCHIVE_NAME = re.compile(r"^(\d{4}-\d{2})(?:\.([1-9][0-9]{0,5}))?\.md\.gz$")
_GZIP_MAGIC = b"\x1f\x8b\x08"
_CHUNK = 1 << 16
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class ArchiveTooLarge(StorageError):
    """An archive decompresses to more than `warm.archive_max_bytes`: memd does not read it."""


@dataclass(frozen=True)
class ArchivedDay:
    name: str
    sha256: str
    data: bytes


@dataclass
class _Archive:
    """One archive file as read: its bytes, the days it holds, and what is wrong with it ("" when whole)."""

    path: Path
    raw: bytes
    days: list[ArchivedDay]
    damage: str
    size: int  # decompressed bytes
    stat: os.stat_result | None  # None: the file does not exist yet


def plain_size(name: str, data: bytes) -> int:
    """What a day adds to its archive's decompressed size (marker line included): compared with the cap."""
    return len(_header(name, data)) + len(data)


# --- writing ---------------------------------------------------------------------------------------------------


def add_to_month(archive_dir: Path, month: str, days: list[tuple[str, bytes]], max_bytes: int) -> list[str]:
    """Put `days` (name, bytes; each at most `max_bytes` with its marker) into the archive of `month`, durably.
    A day already there with the same SHA-256 (a crash stopped its unlink) is not added twice. Returns what was
    found wrong on the way; raises OSError when an archive could not be written or did not verify."""
    warnings: list[str] = []
    fsio.ensure_dir(archive_dir)
    fsio.remove_stale_temp_files([archive_dir])  # a sweep that died between write and rename; one writer
    known: set[tuple[str, str]] = set()
    target: _Archive | None = None
    last = -1
    for index, path in month_archives(archive_dir, month):
        last = index
        target = None  # only the last file of the month is ever added to, and only when it reads back whole
        if not _still_regular(path):
            warnings.append(f"{_shown(path)} is not a regular file; left alone, new days go to a new file")
            continue
        try:
            archive = _read_archive(path, max_bytes)
        except ArchiveTooLarge as exc:
            warnings.append(f"{exc.message}; kept as it is, new days go to a new file")
            continue
        known |= {(d.name, d.sha256) for d in archive.days}
        if archive.damage:
            warnings.append(
                f"{_shown(path)} is damaged ({archive.damage}); kept exactly as it is (its intact days stay "
                "readable), new days go to a new file"
            )
            continue
        target = archive
    new: list[ArchivedDay] = []
    for name, data in days:
        digest = hashlib.sha256(data).hexdigest()
        if (name, digest) not in known:
            known.add((name, digest))
            new.append(ArchivedDay(name, digest, data))
    while new:
        if target is None or target.size + plain_size(new[0].name, new[0].data) > max_bytes:
            last += 1
            target = _Archive(_archive_path(archive_dir, month, last), b"", [], "", 0, None)
        batch: list[ArchivedDay] = []
        size = target.size
        while new and size + plain_size(new[0].name, new[0].data) <= max_bytes:
            size += plain_size(new[0].name, new[0].data)
            batch.append(new.pop(0))
        if not batch:  # even an empty file cannot hold it: the caller keeps such days out
            raise OSError(errno.EFBIG, f"{_shown(target.path)}: a day does not fit in warm.archive_max_bytes")
        target = _write_verified(target, batch, max_bytes)
    return warnings


def _write_verified(target: _Archive, batch: list[ArchivedDay], max_bytes: int) -> _Archive:
    """Write the archive's bytes plus the new members beside it, verify the copy on disk, rename it into place."""
    members = b"".join(gzip.compress(_header(d.name, d.data) + d.data, mtime=0) for d in batch)
    data = target.raw + members
    directory = target.path.parent
    tmp = fsio.temp_name(target.path)
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | _O_CLOEXEC | _O_NOFOLLOW, 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
            back = _pread_all(fd)
        finally:
            os.close(fd)
        expected = [*target.days, *batch]
        check = _scan(back, _shown(target.path), max_bytes)
        if check.damage or [(d.name, d.sha256, d.data) for d in check.days] != [
            (d.name, d.sha256, d.data) for d in expected
        ]:
            raise OSError(errno.EIO, f"{_shown(target.path)}: the new archive did not read back whole; not replaced")
        if target.stat is None:  # a new file: never over something that appeared there meanwhile
            os.link(tmp, target.path)
            os.unlink(tmp)
        elif _changed(target.path, target.stat):
            raise OSError(errno.EAGAIN, f"{_shown(target.path)} changed during the sweep; not replaced")
        else:
            os.replace(tmp, target.path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsio.fsync_dir(directory)
    return _Archive(target.path, data, expected, "", check.size, os.lstat(target.path))


def _pread_all(fd: int) -> bytes:
    parts, offset = [], 0
    while chunk := os.pread(fd, 1 << 20, offset):
        parts.append(chunk)
        offset += len(chunk)
    return b"".join(parts)


def _header(name: str, data: bytes) -> bytes:
    return f"<!-- memd-archive: {name} sha256={hashlib.sha256(data).hexdigest()} bytes={len(data)} -->\n".encode()


def _archive_path(archive_dir: Path, month: str, index: int) -> Path:
    return archive_dir / (f"{month}.md.gz" if index == 0 else f"{month}.{index}.md.gz")


def month_archives(archive_dir: Path, month: str) -> list[tuple[int, Path]]:
    """Every archive file of `month` (`YYYY-MM`), in the order they were started: (index, path). None when
    `archive/` is a symlink: what it points at is not this workspace's archive."""
    try:
        if stat.S_ISLNK(os.lstat(archive_dir).st_mode):
            return []
        names = os.listdir(archive_dir)
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = []
    for name in names:
        match = _ARCHIVE_NAME.match(name)
        if match and match.group(1) == month:
            found.append((int(match.group(2) or 0), archive_dir / name))
    return sorted(found)


def _changed(path: Path, st: os.stat_result) -> bool:
    try:
        now = os.lstat(path)
    except FileNotFoundError:
        return True
    return (now.st_ino, now.st_size, now.st_mtime_ns) != (st.st_ino, st.st_size, st.st_mtime_ns)


# --- reading ---------------------------------------------------------------------------------------------------


@dataclass
class _Scan:
    days: list[ArchivedDay]
    damage: str  # "" when the bytes are whole members of marked days, and nothing else
    size: int  # bytes decompressed


def _read_archive(path: Path, max_bytes: int) -> _Archive:
    st = os.lstat(path)
    if st.st_size > max_bytes:  # compressed bigger than the cap: the text is bigger still (or not gzip at all)
        raise _too_large(path, max_bytes)
    raw = fsio.read_bytes(path) or b""
    scan = _scan(raw, _shown(path), max_bytes)
    return _Archive(path, raw, scan.days, scan.damage, scan.size, st)


def _scan(raw: bytes, shown: str, max_bytes: int) -> _Scan:
    """Decompress member by member, never more than `max_bytes` in all (garbage tried and failed counts too)."""
    days: list[ArchivedDay] = []
    problems: list[str] = []
    offset = total = 0
    while offset < len(raw):
        member, end, produced, problem = _inflate(raw, offset, max_bytes - total)
        total += produced
        if total > max_bytes:
            raise _too_large_named(shown, max_bytes)
        if member is None:
            problems.append(f"{problem} at byte {offset}")
            resume = raw.find(_GZIP_MAGIC, offset + 1)  # the members after a damaged one are still readable
            if resume < 0:
                break
            offset = resume
            continue
        parsed, whole = _parse_member(member)
        days += parsed
        if not whole:
            problems.append(f"the member at byte {offset} is not a memd day or fails its SHA-256")
        offset = end
    return _Scan(days, "; ".join(problems[:3]) + ("; ..." if len(problems) > 3 else ""), total)


def _inflate(raw: bytes, offset: int, budget: int) -> tuple[bytes | None, int, int, str]:
    """The gzip member at `offset`: (its data or None, where it ends, bytes produced, what is wrong or "").
    Stops as soon as more than `budget` bytes came out (the caller reports that)."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    out = bytearray()
    pos = offset
    pending = b""
    while True:
        if not pending:
            if pos >= len(raw):
                return None, pos, len(out), "a torn member (the file ends inside it)"
            pending = raw[pos : pos + _CHUNK]
            pos += len(pending)
        try:
            out += d.decompress(pending, max(budget - len(out), 0) + 1)
        except zlib.error as exc:
            return None, pos, len(out), f"bad gzip data ({exc})"
        if len(out) > budget:
            return None, pos, len(out), "too large"
        if d.eof:
            return bytes(out), pos - len(d.unused_data), len(out), ""
        pending = d.unconsumed_tail


def _parse_member(member: bytes) -> tuple[list[ArchivedDay], bool]:
    """The days in one member, and whether the member is nothing but whole, checksummed days."""
    days: list[ArchivedDay] = []
    pos = 0
    while pos < len(member):
        match = _MARKER.match(member, pos)
        if match is None:
            return days, False
        start = match.end()
        end = start + int(match.group(3))
        data = member[start:end]
        if end > len(member) or hashlib.sha256(data).hexdigest() != match.group(2).decode():
            return days, False
        days.append(ArchivedDay(match.group(1).decode(), match.group(2).decode(), data))
        pos = end
    return days, bool(days)


def read_archive_days(archive: Path, max_bytes: int = DEFAULT_ARCHIVE_MAX_BYTES) -> list[ArchivedDay]:
    """Every readable day of one archive file, in file order (the intact members of a damaged one too). Raises
    ArchiveTooLarge past the cap, OSError when the file cannot be read."""
    return _read_archive(archive, max_bytes).days


def read_archive_text(archive: Path, max_bytes: int = DEFAULT_ARCHIVE_MAX_BYTES) -> str:
    """Every readable day of one archive file as text, markers included (what `zcat` shows of a whole one)."""
    days = _read_archive(archive, max_bytes).days
    return b"".join(_header(d.name, d.data) + d.data for d in days).decode("utf-8", "replace")


def read_archived_day(warm_dir: Path, day: date, max_bytes: int = DEFAULT_ARCHIVE_MAX_BYTES) -> str | None:
    """The text of an archived day from any archive file of its month (the latest copy wins), or None when no
    archive holds it. Raises ArchiveTooLarge or CorruptFile when it is not found but an archive of the month
    could not be read whole (the day may be in the part that could not be read)."""
    name = warm_format.day_filename(day)
    found: ArchivedDay | None = None
    unreadable: MemdError | None = None
    for _, path in month_archives(warm_dir / ARCHIVE_DIR, name[:7]):
        if not _still_regular(path):
            continue
        try:
            archive = _read_archive(path, max_bytes)
        except ArchiveTooLarge as exc:
            unreadable = exc
            continue
        except FileNotFoundError:  # removed since the listing
            continue
        copies = [d for d in archive.days if d.name == name]
        if copies:
            found = copies[-1]
        if archive.damage and unreadable is None:
            unreadable = CorruptFile(
                f"{_shown(path)} is damaged ({archive.damage}); {name} may be in the part that cannot be read",
                data={"file": _shown(path)},
            )
    if found is not None:
        return found.data.decode("utf-8", "replace")
    if unreadable is not None:
        raise unreadable
    return None


# --- helpers ---------------------------------------------------------------------------------------------------


def _too_large(path: Path, max_bytes: int) -> ArchiveTooLarge:
    return _too_large_named(_shown(path), max_bytes)


def _too_large_named(shown: str, max_bytes: int) -> ArchiveTooLarge:
    return ArchiveTooLarge(
        f"{shown} decompresses to more than warm.archive_max_bytes ({max_bytes} bytes); memd does not read it "
        "(raise the limit if the archive is genuine)",
        data={"file": shown, "archive_max_bytes": max_bytes},
    )


def _shown(path: Path) -> str:
    """How an archive is named in messages: relative to the workspace, never a client-facing absolute path."""
    return f"warm/{ARCHIVE_DIR}/{path.name}"


def _still_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False
