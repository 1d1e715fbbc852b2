"""Warm retention: which day files have expired, and deleting or archiving them safely.

Expired means: a regular file directly in `warm/` whose name is a valid `YYYY-MM-DD.md` calendar date at least
`retention_days` days before today, where "today" is the date in the configured time zone (dates are compared,
not durations, so a DST change cannot shift the window). Never: symlinks (neither followed nor deleted), other
names, future dates, anything outside `warm/`. The plan is computed once and the real run removes exactly what a
dry run lists.

Archive mode appends each expired day to `warm/archive/YYYY-MM.md.gz` as its own gzip member, headed by a marker
line with the day's name, SHA-256 and byte length, fsyncs it, and only then deletes the day file. A crash between
the two steps is repaired by the next sweep, which finds the marker and does not append the day twice; a crash
that tore the member itself is repaired by cutting the torn bytes off before the next append.
Imports memd.fsio and the warm format.
"""

from __future__ import annotations

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
from memd.tiers import warm_format

ARCHIVE_DIR = "archive"
_MARKER = re.compile(rb"<!-- memd-archive: (\d{4}-\d{2}-\d{2}\.md) sha256=([0-9a-f]{64}) bytes=(\d+) -->\n")


@dataclass(frozen=True)
class SweepPlan:
    directory: Path
    expired: tuple[str, ...]  # file names, oldest first


def plan_sweep(directory: Path, today: date, retention_days: int) -> SweepPlan:
    expired: list[tuple[date, str]] = []
    if directory.is_symlink():  # warm/ itself replaced by a link: what it points at is not ours to delete
        return SweepPlan(directory, ())
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        entries = []
    for entry in entries:
        day = warm_format.parse_day_filename(entry.name)
        if day is None or (today - day).days < retention_days:
            continue
        if stat.S_ISREG(entry.stat(follow_symlinks=False).st_mode):
            expired.append((day, entry.name))
    return SweepPlan(directory, tuple(name for _, name in sorted(expired)))


def delete_expired(plan: SweepPlan) -> list[str]:
    """Remove the planned files (runs in a worker thread). Returns what was removed."""
    removed: list[str] = []
    if plan.directory.is_symlink():
        return removed
    for name in plan.expired:
        path = plan.directory / name
        if not _still_regular(path):
            continue
        os.unlink(path)
        removed.append(name)
    if removed:
        fsio.fsync_dir(plan.directory)
    return removed


def archive_expired(plan: SweepPlan) -> list[str]:
    """Move the planned files into monthly gzip archives, durably, then delete them. Returns what was moved."""
    archive_dir = plan.directory / ARCHIVE_DIR
    moved: list[str] = []
    if plan.directory.is_symlink():
        return moved
    for name in plan.expired:
        path = plan.directory / name
        if not _still_regular(path):
            continue
        fsio.ensure_dir(archive_dir)
        data = fsio.read_bytes(path) or b""
        digest = hashlib.sha256(data).hexdigest()
        archive = archive_dir / f"{name[:7]}.md.gz"
        days, whole = _read_members(archive)
        if whole is not None:  # a crash tore the last member: cut it off (its day file is still in warm/)
            _truncate_durably(archive, whole)
        if not any(d.name == name and d.sha256 == digest for d in days):
            header = f"<!-- memd-archive: {name} sha256={digest} bytes={len(data)} -->\n".encode()
            fsio.durable_append(archive, gzip.compress(header + data, mtime=0))
        os.unlink(path)
        fsio.fsync_dir(plan.directory)
        moved.append(name)
    return moved


@dataclass(frozen=True)
class ArchivedDay:
    name: str
    sha256: str
    data: bytes


def _still_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def _truncate_durably(path: Path, size: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW)
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    finally:
        os.close(fd)


def _whole_members(raw: bytes) -> tuple[list[bytes], int | None]:
    """The decompressed whole gzip members, and the length they span when a torn one follows (else None)."""
    members: list[bytes] = []
    offset = 0
    while offset < len(raw):
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            member = d.decompress(raw[offset:])
        except zlib.error:
            return members, offset
        if not d.eof:
            return members, offset
        members.append(member)
        offset = len(raw) - len(d.unused_data)
    return members, None


def _read_members(archive: Path) -> tuple[list[ArchivedDay], int | None]:
    """Every whole archived day, and the byte length of the whole members when a torn one follows (else None)."""
    members, whole = _whole_members(fsio.read_bytes(archive) or b"")
    return [day for member in members for day in _parse_member(member)], whole


def _parse_member(member: bytes) -> list[ArchivedDay]:
    days: list[ArchivedDay] = []
    pos = 0
    while pos < len(member):
        match = _MARKER.match(member, pos)
        if match is None:
            break
        start = match.end()
        end = start + int(match.group(3))
        days.append(ArchivedDay(match.group(1).decode(), match.group(2).decode(), member[start:end]))
        pos = end
    return days


def read_archive_text(archive: Path) -> str:
    """The whole archive as text, markers included (what `zcat` shows), in the order days were archived."""
    members, _ = _whole_members(fsio.read_bytes(archive) or b"")
    return b"".join(members).decode("utf-8", "replace")


def read_archived_day(warm_dir: Path, day: date) -> str | None:
    """The text of an archived day, or None when it is not in the archive (the latest copy wins)."""
    name = warm_format.day_filename(day)
    days, _ = _read_members(warm_dir / ARCHIVE_DIR / f"{name[:7]}.md.gz")
    found = [d for d in days if d.name == name]
    return found[-1].data.decode("utf-8", "replace") if found else None
