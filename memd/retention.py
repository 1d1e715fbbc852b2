"""Warm retention: which day files have expired, and deleting or archiving them safely.

Expired means: a regular file directly in `warm/` whose name is a valid `YYYY-MM-DD.md` calendar date at least
`retention_days` days before today, where "today" is the date in the configured time zone (dates are compared,
not durations, so a DST change cannot shift the window). Never: symlinks (neither followed nor deleted), other
names, future dates, anything outside `warm/`. The plan is computed once and the real run removes exactly what a
dry run lists.

Archive mode appends each expired day to `warm/archive/YYYY-MM.md.gz` as its own gzip member, headed by a marker
line with the day's name and SHA-256, fsyncs it, and only then deletes the day file. A crash between the two
steps is repaired by the next sweep, which finds the marker and does not append the day twice.
Imports memd.fsio and the warm format.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import stat
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from memd import fsio
from memd.tiers import warm_format

ARCHIVE_DIR = "archive"
_MARKER = re.compile(r"^<!-- memd-archive: (\d{4}-\d{2}-\d{2}\.md) sha256=([0-9a-f]{64}) -->$", re.M)


@dataclass(frozen=True)
class SweepPlan:
    directory: Path
    expired: tuple[str, ...]  # file names, oldest first


def plan_sweep(directory: Path, today: date, retention_days: int) -> SweepPlan:
    expired: list[tuple[date, str]] = []
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
    for name in plan.expired:
        path = plan.directory / name
        if not _still_regular(path):
            continue
        fsio.ensure_dir(archive_dir)
        data = fsio.read_bytes(path) or b""
        digest = hashlib.sha256(data).hexdigest()
        archive = archive_dir / f"{name[:7]}.md.gz"
        if (name, digest) not in set(_markers(archive)):
            header = f"<!-- memd-archive: {name} sha256={digest} -->\n".encode()
            fsio.durable_append(archive, gzip.compress(header + data, mtime=0))
        os.unlink(path)
        fsio.fsync_dir(plan.directory)
        moved.append(name)
    return moved


def _still_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def _markers(archive: Path) -> Iterator[tuple[str, str]]:
    text = read_archive_text(archive)
    for match in _MARKER.finditer(text):
        yield match.group(1), match.group(2)


def read_archive_text(archive: Path) -> str:
    data = fsio.read_bytes(archive)
    if not data:
        return ""
    try:
        return gzip.decompress(data).decode("utf-8", "replace")
    except (OSError, EOFError):  # a member torn by a crash mid-append: read what is whole
        return _decompress_whole_members(data)


def _decompress_whole_members(data: bytes) -> str:
    out: list[str] = []
    while data:
        d = zlib.decompressobj(16 + 15)
        try:
            out.append(d.decompress(data).decode("utf-8", "replace"))
        except Exception:
            break
        if not d.eof:
            break
        data = d.unused_data
    return "".join(out)


def read_archived_day(warm_dir: Path, day: date) -> str | None:
    """The text of an archived day, or None when it is not in the archive."""
    name = warm_format.day_filename(day)
    text = read_archive_text(warm_dir / ARCHIVE_DIR / f"{name[:7]}.md.gz")
    found: str | None = None
    matches = list(_MARKER.finditer(text))
    for i, match in enumerate(matches):
        if match.group(1) == name:
            end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
            found = text[match.end() + 1 : end]
    return found
