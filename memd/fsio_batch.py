"""The guarded batch engine: a batch's writes (`write_batch`) and a restore's (`restore_tree`), made durable with
memd.fsio's primitives in memd's I/O threads.

Contract 2 is decided here, at the moment a replace is published (not when its batch was planned): a guarded
replace puts the new file in place with renameat2(RENAME_EXCHANGE), which hands back the file it displaced; when
that is not the version the batch was planned from (a person saved the file meanwhile), the swap is undone and
`OutsideChange` tells the writer to plan again on the new version. The window that remains is a writer that
opened the old file before the exchange and writes to it after the comparison (an in-place `>>` straddling the
publish: two system calls wide). Where the filesystem has no RENAME_EXCHANGE the comparison is made just before a
plain rename instead (a window of one read and one rename).
Imports memd.fsio.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from memd import fsio, fsio_append


class OutsideChange(Exception):
    """A guarded replace found the file changed since its batch was planned, or still open for writing by another
    process (`busy`: its write may be on the way); nothing of that file was changed."""

    def __init__(self, path: Path, busy: bool = False) -> None:
        why = "is held open for writing by another process" if busy else "changed outside memd"
        super().__init__(f"{path} {why} while a batch was being published")
        self.path = path
        self.busy = busy


@dataclass(frozen=True, slots=True)
class FileWrite:
    """One durable change in a batch: append `data` to `path`, or replace `path` with it.

    A `guarded` replace is published only over `expected`, the bytes its batch was planned from (None: the file
    did not exist); anything else there raises OutsideChange. A `guarded` append is made only to the file its
    batch was planned from, as `expected_fingerprint` says it looked, and raises OutsideChange otherwise (what it
    appends must go under the file's last line as memd read it: cold/MEMORY.md's last section). An append with
    `expected_size` that finds the file grown by someone else whose last line is still open starts on a new line
    instead of gluing onto it."""

    path: Path
    data: bytes
    append: bool
    guarded: bool = False
    expected: bytes | None = None
    expected_size: int | None = None
    expected_fingerprint: fsio.Fingerprint | None = None
    mark: bytes | None = None  # the file's fsio_append.RUN_XATTR after the write (None: none)


@dataclass(slots=True)
class _Staged:
    write: FileWrite
    tmp: Path
    fingerprint: fsio.Fingerprint
    published: bool = False
    holds_displaced: bool = False  # after an exchange, `tmp` names the file that was displaced


def apply_writes(writes: Iterable[FileWrite]) -> list[fsio.Fingerprint]:
    """Apply a batch (runs in a worker thread) and return one fingerprint per write, in order.

    Every replace is staged first (temp file written and fsynced), then published, then the appends are made,
    guarded ones first. Guarded writes go in all or none: a conflict undoes the replaces already published and
    raises OutsideChange before any append, so the writer can plan the whole batch again; a failed append puts
    the displaced files back and cuts the guarded appends made off again, so a batch that fails leaves its
    guarded files as they were. Raises on the first failure."""
    writes = list(writes)
    staged: dict[int, _Staged] = {}
    published: list[_Staged] = []
    fps: list[fsio.Fingerprint] = []
    made: list[tuple[FileWrite, int, fsio.Fingerprint]] = []  # guarded appends made, cut off if the batch fails
    try:
        for i, w in enumerate(writes):
            if not w.append:
                staged[i] = _stage(w)
        for st in staged.values():
            _publish(st)
            published.append(st)
        appended: dict[int, fsio.Fingerprint] = {}
        # Guarded appends first: one that finds its file changed raises before any other append is made (a batch
        # that must plan again has appended nothing). Each is checked on the descriptor that appends.
        for guarded in (True, False):
            for i, w in enumerate(writes):
                if not w.append or w.guarded is not guarded:
                    continue
                if guarded:
                    if w.expected_fingerprint is None:
                        raise OutsideChange(w.path)
                    try:
                        appended[i], size_before = fsio_append.guarded_append(
                            w.path, w.data, w.expected_fingerprint, w.mark
                        )
                    except fsio_append.NotAsExpected:
                        raise OutsideChange(w.path) from None
                    made.append((w, size_before, appended[i]))
                else:
                    appended[i] = fsio.durable_append(w.path, w.data, expected_size=w.expected_size)
        for i, w in enumerate(writes):
            fps.append(appended[i] if w.append else staged[i].fingerprint)
    except BaseException:
        for w, size_before, after in reversed(made):
            with contextlib.suppress(OSError):
                fsio_append.undo_append(w.path, size_before, after)
        for st in reversed(published):
            with contextlib.suppress(OSError):
                _unpublish(st)
        raise
    finally:
        _discard_temps(staged.values())
    return fps


def _stage(w: FileWrite) -> _Staged:
    directory = w.path.parent
    fsio._refuse_symlinked_dir(directory)
    tmp = fsio.temp_name(w.path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | fsio._O_CLOEXEC | fsio._O_NOFOLLOW, 0o644)
    try:
        try:
            if w.mark is not None:
                fsio_append.set_run_mark(fd, w.mark)
            fsio._write_all(fd, w.data)
            os.fsync(fd)
            st = os.fstat(fd)
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return _Staged(w, tmp, fsio.Fingerprint.of_stat(st))


def _publish(st: _Staged) -> None:
    w = st.write
    if w.guarded and _current_bytes(w.path) != w.expected:
        # Checked before memd's version becomes visible too: most outside edits are caught here, so nobody sees
        # (or appends to) a version that is about to be withdrawn.
        raise OutsideChange(w.path)
    if w.guarded and fsio.RENAMES.available_for(w.path):
        try:
            if w.expected is None:
                fsio.RENAMES.noreplace(st.tmp, w.path)
            else:
                fsio.RENAMES.exchange(st.tmp, w.path)
        except (FileExistsError, FileNotFoundError):  # created, or deleted, by someone else since planning
            raise OutsideChange(w.path) from None
        except OSError as exc:
            if not fsio.RENAMES.unsupported(exc, w.path):
                raise
        else:
            st.published = True
            st.holds_displaced = w.expected is not None
            if st.holds_displaced:
                # First: is a writer that opened the old file before the exchange still holding it? Its write
                # would land in the displaced file after any comparison. Nobody else can open the displaced file
                # now (it is under memd's random temp name), so once that is ruled out the comparison is final.
                busy = _held_open_for_writing(st.tmp)
                if busy or not _holds(st.tmp, w.expected):
                    _unpublish(st)
                    raise OutsideChange(w.path, busy=busy)
            return
    os.replace(st.tmp, w.path)  # the fallback (no RENAME_EXCHANGE here): compared just above, then renamed
    st.published = True


def _unpublish(st: _Staged) -> None:
    """Put back what a published replace displaced, unless someone replaced the file again since (then their newer
    version stays, as it would have without memd). Bytes someone appended to memd's version while it was in place
    are carried over to the file put back, so neither side's append is lost."""
    w = st.write
    if not w.guarded:  # nothing is known of what an unguarded replace displaced: it stays
        return
    try:
        current = os.lstat(w.path)
    except FileNotFoundError:
        current = None
    if current is None or current.st_ino != st.fingerprint.ino:
        return
    for _ in range(_WRITER_WAITS):  # a `>>` into memd's version is under way: let it land first
        if not _held_open_for_writing(w.path):
            break
        time.sleep(0.001)
    now = _current_bytes(w.path) or b""
    if not now.startswith(w.data):  # rewritten in place on top of memd's version: that edit stays
        return
    appended = now[len(w.data) :]
    if st.holds_displaced:
        fsio.RENAMES.exchange(st.tmp, w.path)  # the displaced file back in place; ours is the temp now
        if appended:
            fsio.durable_append(w.path, appended)
    elif w.expected is None:
        os.unlink(w.path)
    else:  # the rename fallback displaced the old file for good: write the planned-from bytes back
        fsio.atomic_replace(w.path, w.expected + appended)
    st.published = False
    st.holds_displaced = False


_F_SETSIG = getattr(fcntl, "F_SETSIG", 10)
_WRITER_WAITS = 50  # 1 ms each


def _held_open_for_writing(path: Path) -> bool:
    """Does another process hold `path` open for writing? The kernel refuses a read lease (EAGAIN) exactly then.
    False where leases are refused for other reasons (a file someone else owns without CAP_LEASE, a filesystem
    without leases): the content comparison alone decides there. The lease is dropped at once; a lease break
    would signal SIGIO, whose default action kills, so it is redirected to SIGURG, ignored by default."""
    try:
        fd = os.open(path, os.O_RDONLY | fsio._O_CLOEXEC | fsio._O_NOFOLLOW | fsio._O_NONBLOCK)
    except OSError:
        return False
    try:
        try:
            fcntl.fcntl(fd, _F_SETSIG, signal.SIGURG)
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
        except OSError as exc:
            return exc.errno == errno.EAGAIN
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
        return False
    finally:
        os.close(fd)


def _holds(path: Path, expected: bytes | None) -> bool:
    try:
        return _current_bytes(path) == expected
    except OSError:  # a symlink or a special file was displaced: certainly not what was planned from
        return False


def _current_bytes(path: Path) -> bytes | None:
    try:
        return fsio.read_bytes(path)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EINVAL, errno.ENXIO):
            return b"\0memd: not a regular file\0"  # never equal to anything planned from
        raise


def _discard_temps(staged: Iterable[_Staged]) -> None:
    """Remove the temp names left (displaced files, unpublished temps) and make every rename durable."""
    directories: set[Path] = set()
    for st in staged:
        directories.add(st.tmp.parent)
        if not st.published or st.holds_displaced:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(st.tmp)
    for directory in sorted(directories):
        fsio.fsync_dir(directory)


# --- the worker side of a batch and of a restore (run in memd's I/O threads, never on the loop) ------------


def write_batch(root: fsio.PinnedDir, writes: list[FileWrite]) -> list[fsio.Fingerprint]:
    """Runs in a worker thread. The workspace must still be the directory memd opened (a swapped-in symlink or
    directory fails the batch: nothing is written anywhere else). A tier directory someone removed is made again
    (the workspace root never is: a removed workspace stays removed), so one `rm -r warm` does not fail every
    later write. Raises OutsideChange when a guarded replace finds a person's version in place."""
    root.verify()
    for tier_dir in {w.path.parent for w in writes}:
        if not os.path.lexists(tier_dir):
            fsio.ensure_dir(tier_dir)
    return apply_writes(writes)


def restore_tree(
    pinned: fsio.PinnedDir, files: dict[str, bytes], paths: list[str], marks: Mapping[str, bytes] | None = None
) -> list[str]:
    """Runs in a worker thread: write every file of `files`, remove the other files under `paths`. Every path is
    relative and normal (no `..`, `.`, empty part or leading `/`): any other is refused (EINVAL) before anything is
    written, so nothing ever lands outside the workspace. `marks`: the fsio_append.RUN_XATTR a file of `files` gets
    (set on the new file before it is renamed in place, so it is never there without it; set on the file as it is
    when it already holds those bytes)."""
    marks = marks or {}
    for rel in [*files, *paths]:
        if not rel or os.path.isabs(rel) or os.path.normpath(rel) != rel or rel in (".", "..") or rel.startswith("../"):
            raise OSError(errno.EINVAL, f"memd does not restore {rel!r}: not a plain path inside the workspace", rel)
    pinned.verify()
    root = pinned.path
    changed: list[str] = []
    for top in {rel.split("/")[0] for rel in files} | set(paths):
        if (root / top).is_symlink():
            raise OSError(errno.ELOOP, f"{root / top} is a symlink; memd does not restore through it")
    for rel, data in sorted(files.items()):
        target = root / rel
        mark = marks.get(rel)
        if fsio.read_bytes(target) != data:
            fsio.ensure_dir(target.parent)
            if mark is None:
                fsio.atomic_replace(target, data)
            else:
                apply_writes([FileWrite(target, data, append=False, mark=mark)])
            changed.append(rel)
        elif mark is not None and fsio_append.run_mark(target) != mark:
            _mark_in_place(target, mark)
    for top in paths:
        base = root / top
        candidates = (
            [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file() and not p.is_symlink())
        )
        for path in candidates:
            rel = str(path.relative_to(root))
            if rel not in files and not fsio.is_temp_name(path.name):
                path.unlink()
                fsio.fsync_dir(path.parent)
                changed.append(rel)
    return changed


def _mark_in_place(path: Path, mark: bytes) -> None:
    fd = os.open(path, os.O_RDONLY | fsio._O_CLOEXEC | fsio._O_NOFOLLOW | fsio._O_NONBLOCK)
    try:
        fsio_append.set_run_mark(fd, mark)
        os.fsync(fd)
    finally:
        os.close(fd)
