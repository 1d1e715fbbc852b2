"""Warm retention: which day files have expired, and deleting or archiving them safely.

Expired means: a regular file directly in `warm/` whose name is a valid `YYYY-MM-DD.md` calendar date at least
`retention_days` days before today, where "today" is the date in the configured time zone (dates are compared,
not durations, so a DST change cannot shift the window). Never: symlinks (neither followed nor deleted), other
names, future dates, anything outside `warm/`. The plan is computed once and the real run removes exactly what a
dry run lists, except the days git does not hold (below), which it keeps and reports.

Nothing leaves `warm/` that git does not hold: when the caller passes what git holds (`Held`, the blob ids at
HEAD right after the pre-sweep commit), a day is deleted or archived only if the bytes read from it just before
are that blob (the git blob id is computed here from those bytes, so a day someone changed after the commit, or
one git stores differently, e.g. through an adopted repository's `.gitattributes`, stays). Without `Held`
(snapshots disabled, or `warm` not snapshotted) nothing is checked, as before. Between that read and the
`unlink` only an `lstat` (size, mtime, inode unchanged) stands.

A workspace memd adopted with day files already in `warm/` (written before memd first served it: by agents written
after the tiered-memory article, say) keeps them until a person has seen what retention will do: while its
`Adoption` record (in the state directory, never in a tier file) is pending, a sweep only reports, and says how to
confirm (`warm.adopted_sweep = "run"` turns this off).

Archive mode hands the days to memd.archive (monthly gzip archives, replaced whole after a read-back check) and
deletes each day file only once its archive is durable; a crash in between leaves the day file, and the next
sweep finds it archived already and does not add it twice.
Imports memd.fsio, memd.archive and the warm format.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from memd import archive, fsio
from memd.archive import read_archived_day as read_archived_day  # what Workspace.day_entries reads
from memd.tiers import warm_format

log = logging.getLogger(__name__)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_GONE = "removed by someone else during the sweep"


@dataclass(frozen=True)
class SweepPlan:
    directory: Path
    expired: tuple[str, ...]  # file names, oldest first


@dataclass
class SweepOutcome:
    """What a real run did: the days it removed, the days it kept and why, and what it found wrong on the way."""

    removed: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)  # day file name -> why it stays in warm/
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Held:
    """What git holds of `warm/` at one commit: the blob id of each regular file directly in it."""

    commit: str
    blobs: Mapping[str, str]  # file name -> blob id (40 hex digits: SHA-1 repository, 64: SHA-256)

    def why_not(self, name: str, data: bytes) -> str | None:
        """None when git holds exactly `data` as `warm/<name>`; otherwise why the day must stay."""
        blob = self.blobs.get(name)
        if blob is None:
            return f"not in the snapshot at {self.commit[:12]}; kept until a snapshot holds it"
        if blob_id(data, len(blob)) != blob:
            return f"differs from the snapshot at {self.commit[:12]}; kept until a snapshot holds these exact bytes"
        return None


@dataclass(frozen=True)
class Adoption:
    """What memd found the first time it served a workspace: were there day files in `warm/` already (`adopted`),
    and has a person confirmed a sweep of them since (`confirmed_at`)? Until then a sweep only reports."""

    adopted: bool
    first_served: str  # ISO 8601
    day_files: int = 0  # day files in warm/ then
    confirmed_at: str = ""  # when a sweep with `confirm` ran

    @property
    def pending(self) -> bool:
        return self.adopted and not self.confirmed_at

    def confirmed(self, at: str) -> Adoption:
        return Adoption(self.adopted, self.first_served, self.day_files, at)


def load_adoption(path: Path) -> Adoption | None:
    """The workspace's adoption record, or None when memd has not served it before (no record)."""
    try:
        data = json.loads(path.read_bytes())
        return Adoption(
            bool(data["adopted"]),
            str(data["first_served"]),
            int(data.get("day_files", 0)),
            str(data.get("confirmed_at") or ""),
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("adoption record %s is unreadable (%s): its sweeps only report until one is confirmed", path, exc)
        return Adoption(True, "", 0)  # the safe reading: keep the days


def save_adoption(path: Path, adoption: Adoption) -> None:
    fsio.ensure_dir(path.parent, 0o700)
    data = {
        "adopted": adoption.adopted,
        "first_served": adoption.first_served,
        "day_files": adoption.day_files,
        "confirmed_at": adoption.confirmed_at,
    }
    fsio.atomic_replace(path, (json.dumps(data, indent=2) + "\n").encode(), 0o600)


def blob_id(data: bytes, hex_digits: int = 40) -> str:
    """The id git gives `data` as a blob (`git hash-object --no-filters`), SHA-1 or, for 64 digits, SHA-256."""
    h = hashlib.sha256() if hex_digits == 64 else hashlib.sha1(usedforsecurity=False)
    h.update(b"blob %d\0" % len(data))
    h.update(data)
    return h.hexdigest()


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


def delete_expired(plan: SweepPlan, held: Held | None = None) -> SweepOutcome:
    """Remove the planned files that git holds (all of them when `held` is None). Runs in a worker thread."""
    outcome = SweepOutcome()
    if plan.directory.is_symlink():
        return outcome
    for name in plan.expired:
        path = plan.directory / name
        if held is None:
            if _still_regular(path):
                os.unlink(path)
                outcome.removed.append(name)
            continue
        day = _read_day(path)
        if day is None:
            continue
        data, st = day
        reason = held.why_not(name, data) or _changed_since(path, st)
        if reason:
            if reason is not _GONE:
                outcome.kept[name] = reason
            continue
        os.unlink(path)
        outcome.removed.append(name)
    if outcome.removed:
        fsio.fsync_dir(plan.directory)
    return outcome


def archive_expired(
    plan: SweepPlan, held: Held | None = None, max_bytes: int = archive.DEFAULT_ARCHIVE_MAX_BYTES
) -> SweepOutcome:
    """Move the planned files that git holds into their monthly archives, durably, then delete them."""
    outcome = SweepOutcome()
    if plan.directory.is_symlink():
        return outcome
    months: dict[str, list[str]] = {}
    for name in plan.expired:
        months.setdefault(name[:7], []).append(name)
    for month, names in months.items():  # one month's days in memory at a time
        days: list[tuple[str, bytes, os.stat_result]] = []
        for name in names:
            day = _read_day(plan.directory / name)
            if day is None:
                continue
            data, st = day
            reason = held.why_not(name, data) if held is not None else None
            if reason is None and archive.plain_size(name, data) > max_bytes:
                reason = f"larger than warm.archive_max_bytes ({max_bytes} bytes); kept in warm/"
            if reason:
                outcome.kept[name] = reason
            else:
                days.append((name, data, st))
        if not days:
            continue
        archive_dir = plan.directory / archive.ARCHIVE_DIR
        outcome.warnings += archive.add_to_month(archive_dir, month, [(n, d) for n, d, _ in days], max_bytes)
        for name, _, st in days:  # each day is in a durable archive now: its file can go
            reason = _changed_since(plan.directory / name, st)
            if reason:
                if reason is not _GONE:
                    outcome.kept[name] = reason
                continue
            os.unlink(plan.directory / name)
            outcome.removed.append(name)
        fsio.fsync_dir(plan.directory)
    for warning in outcome.warnings:
        log.warning("%s: %s", plan.directory, warning)
    return outcome


def _still_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def _read_day(path: Path) -> tuple[bytes, os.stat_result] | None:
    """A day file's bytes and its stat, or None when it is gone or is not a regular file (never followed)."""
    try:
        fd = os.open(path, os.O_RDONLY | _O_CLOEXEC | _O_NOFOLLOW | _O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO):  # swapped for a symlink or a FIFO after planning
            return None
        raise
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            return None
        return f.read(), st


def _changed_since(path: Path, st: os.stat_result) -> str | None:
    """Why `path` is no longer the file `st` describes (None when it still is; `_GONE` when someone removed it):
    the last check before it goes."""
    try:
        now = os.lstat(path)
    except FileNotFoundError:
        return _GONE
    if (now.st_ino, now.st_size, now.st_mtime_ns) != (st.st_ino, st.st_size, st.st_mtime_ns):
        return "changed during the sweep; kept for the next one"
    return None
