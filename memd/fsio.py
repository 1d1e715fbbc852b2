"""Durable file I/O: the only module that writes workspace bytes to disk.

Contract 1 lives here: a function returns only after the bytes are fsynced (the file, and the directory when a
name was created or replaced). Any OSError, an fsync error above all, propagates to the caller: an fsync is
never retried and reported as success, because after a failed fsync the kernel may have dropped the dirty
pages. Symlinks are never followed for writes (O_NOFOLLOW on the file, lstat on its directory).

Contract 2 is decided here too, at the moment a replace is published (not when its batch was planned): a guarded
replace puts the new file in place with renameat2(RENAME_EXCHANGE), which hands back the file it displaced; when
that is not the version the batch was planned from (a person saved the file meanwhile), the swap is undone and
`OutsideChange` tells the writer to plan again on the new version. The window that remains is a writer that
opened the old file before the exchange and writes to it after the comparison (an in-place `>>` straddling the
publish: two system calls wide). Where the filesystem has no RENAME_EXCHANGE the comparison is made just before a
plain rename instead (a window of one read and one rename).
Imports nothing from memd.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import secrets
import signal
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TEMP_MARKER = ".memd-tmp-"
# This process's own temp files carry this token too, so a restart under the same pid (pid 1 in a container)
# still treats the previous run's leftovers as stale, while a reload never removes a batch in flight.
_INSTANCE = f"{os.getpid()}-{secrets.token_hex(3)}"


def temp_name(path: Path) -> Path:
    """A temp file's name beside `path`: hidden, marked as memd's, unique."""
    return path.parent / f".{path.name}{TEMP_MARKER}{_INSTANCE}-{secrets.token_hex(4)}"


_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # opening a FIFO someone planted must fail, not hang the writer


def _require_regular(fd: int, path: Path) -> os.stat_result:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, f"{path} is not a regular file; memd only reads and writes regular files")
    return st


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """What memd last saw of a file: enough to tell that someone else changed it since."""

    size: int
    mtime_ns: int
    ino: int

    @classmethod
    def of_stat(cls, st: os.stat_result) -> Fingerprint:
        return cls(st.st_size, st.st_mtime_ns, st.st_ino)


def matches(fp: Fingerprint | None, st: os.stat_result) -> bool:
    """Is `st` the file `fp` was taken of, unchanged? (Compared field by field: no Fingerprint is made.)"""
    return fp is not None and fp.size == st.st_size and fp.mtime_ns == st.st_mtime_ns and fp.ino == st.st_ino


def fingerprint(path: Path) -> Fingerprint | None:
    """The file's fingerprint, or None when it does not exist (a symlink is reported as itself)."""
    try:
        return Fingerprint.of_stat(os.lstat(path))
    except FileNotFoundError:
        return None


def is_temp_name(name: str) -> bool:
    return TEMP_MARKER in name


def _refuse_symlinked_dir(directory: Path) -> None:
    st = os.lstat(directory)
    if stat.S_ISLNK(st.st_mode):
        raise OSError(errno.ELOOP, f"refusing to write through symlinked directory {directory}")


@dataclass(frozen=True, slots=True)
class PinnedDir:
    """A directory as memd opened it (device and inode). `verify` fails once the path names anything else: a
    symlink swapped in, or another directory moved into its place, so nothing is read, written or deleted there."""

    path: Path
    dev: int
    ino: int

    @classmethod
    def pin(cls, path: Path) -> PinnedDir:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            raise OSError(errno.ELOOP, f"{path} is a symlink; configure the directory it points to", str(path))
        if not stat.S_ISDIR(st.st_mode):
            raise OSError(errno.ENOTDIR, f"{path} is not a directory", str(path))
        return cls(path, st.st_dev, st.st_ino)

    def verify(self) -> None:
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            raise OSError(errno.ENOENT, f"workspace directory {self.path} is gone", str(self.path)) from None
        if stat.S_ISLNK(st.st_mode):
            raise OSError(
                errno.ELOOP,
                f"workspace directory {self.path} was replaced by a symlink; memd will not follow it (put the "
                "directory back, or point the config at the new one and reload)",
                str(self.path),
            )
        if (st.st_dev, st.st_ino) != (self.dev, self.ino):
            raise OSError(
                errno.ESTALE,
                f"workspace directory {self.path} is no longer the directory memd opened (another was moved into its "
                "place); put it back, or restart memd to adopt the new one",
                str(self.path),
            )


class OutsideChange(Exception):
    """A guarded replace found the file changed since its batch was planned, or still open for writing by another
    process (`busy`: its write may be on the way); nothing of that file was changed."""

    def __init__(self, path: Path, busy: bool = False) -> None:
        why = "is held open for writing by another process" if busy else "changed outside memd"
        super().__init__(f"{path} {why} while a batch was being published")
        self.path = path
        self.busy = busy


class Renames:
    """renameat2(2) with the flags `os` does not expose. One object, so a recorder (torture/powerloss.py) can stand
    in for it as it stands in for `os`. `supported` turns False on a filesystem that refuses the flags."""

    RENAME_NOREPLACE = 1
    RENAME_EXCHANGE = 2
    _AT_FDCWD = -100

    def __init__(self) -> None:
        self.supported = True  # False: no renameat2 in this libc at all
        self.refused_on: set[int] = set()  # devices whose filesystem refused the flags (NFS, CIFS, some FUSE)
        self._fn: Any = None
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fn = libc.renameat2
        except (OSError, AttributeError):
            self.supported = False
            return
        fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
        fn.restype = ctypes.c_int
        self._fn = fn

    def _call(self, src: Path, dst: Path, flags: int) -> None:
        if self._fn(self._AT_FDCWD, os.fsencode(src), self._AT_FDCWD, os.fsencode(dst), flags) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), str(src), None, str(dst))

    def exchange(self, src: Path, dst: Path) -> None:
        self._call(src, dst, self.RENAME_EXCHANGE)

    def noreplace(self, src: Path, dst: Path) -> None:
        self._call(src, dst, self.RENAME_NOREPLACE)

    def available_for(self, path: Path) -> bool:
        if not self.supported:
            return False
        if not self.refused_on:
            return True
        try:
            return os.lstat(path.parent).st_dev not in self.refused_on
        except OSError:
            return True

    def unsupported(self, exc: OSError, path: Path) -> bool:
        """Is this the filesystem (or kernel) saying it has no such flag? Then fall back, for that filesystem only."""
        if exc.errno == errno.ENOSYS:
            self.supported = False
            return True
        if exc.errno in (errno.EINVAL, errno.EOPNOTSUPP):
            with contextlib.suppress(OSError):
                self.refused_on.add(os.lstat(path.parent).st_dev)
            return True
        return False


RENAMES = Renames()


def is_real_dir(path: Path) -> bool:
    """A directory, not a symlink to one (nor anything that cannot be looked at)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | _O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_dir(directory: Path, mode: int = 0o755) -> None:
    """Create `directory` (and parents) durably; a symlink in its place is refused."""
    if directory.exists() or directory.is_symlink():
        _refuse_symlinked_dir(directory)
        return
    ensure_dir(directory.parent, mode)
    with contextlib.suppress(FileExistsError):
        os.mkdir(directory, mode)
    fsync_dir(directory.parent)


def atomic_replace(path: Path, data: bytes, mode: int = 0o644) -> Fingerprint:
    """Replace `path` with `data` so that a crash leaves either the old or the new file, never a torn one."""
    directory = path.parent
    _refuse_symlinked_dir(directory)
    tmp = temp_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC | _O_NOFOLLOW, mode)
    try:
        try:
            _write_all(fd, data)
            os.fsync(fd)
            st = os.fstat(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(directory)
    return Fingerprint.of_stat(st)


def durable_append(path: Path, data: bytes, mode: int = 0o644, expected_size: int | None = None) -> Fingerprint:
    """Append `data` with O_APPEND and fsync. On failure the bytes this call added are cut off again.
    `expected_size`: what the caller planned from; a file someone else grew since, leaving its last line open,
    gets a newline first so that the two writers' lines stay apart."""
    directory = path.parent
    _refuse_symlinked_dir(directory)
    created = False
    flags = os.O_WRONLY | os.O_APPEND | _O_CLOEXEC | _O_NOFOLLOW | _O_NONBLOCK
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        fd = os.open(path, flags | os.O_CREAT, mode)
        created = True
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a FIFO with no reader
            raise OSError(errno.EINVAL, f"{path} is not a regular file; memd only writes regular files") from None
        raise
    before = _require_regular(fd, path).st_size
    if (
        expected_size is not None
        and before != expected_size
        and before > 0
        and not data.startswith(b"\n")
        and last_byte(path, before) != b"\n"
    ):
        data = b"\n" + data
    try:
        try:
            _write_all(fd, data)
            os.fsync(fd)
        except BaseException:
            # Best effort: leave no torn entry behind. Nothing was acknowledged, so nothing is lost.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, before)
            raise
        st = os.fstat(fd)
    finally:
        os.close(fd)
    if created:
        fsync_dir(directory)
    return Fingerprint.of_stat(st)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def read_bytes(path: Path) -> bytes | None:
    """The file's bytes, or None when it does not exist. Symlinks are not followed."""
    try:
        fd = os.open(path, os.O_RDONLY | _O_CLOEXEC | _O_NOFOLLOW | _O_NONBLOCK)
    except FileNotFoundError:
        return None
    _require_regular(fd, path)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def read_range(path: Path, offset: int) -> bytes:
    """Bytes from `offset` to the end (what an outside appender added since memd last looked)."""
    fd = os.open(path, os.O_RDONLY | _O_CLOEXEC | _O_NOFOLLOW | _O_NONBLOCK)
    _require_regular(fd, path)
    with os.fdopen(fd, "rb") as f:
        f.seek(offset)
        return f.read()


def last_byte(path: Path, size: int) -> bytes:
    """The byte at `size - 1` (does the file end with a newline?), read without following links."""
    fd = os.open(path, os.O_RDONLY | _O_CLOEXEC | _O_NOFOLLOW | _O_NONBLOCK)
    _require_regular(fd, path)
    try:
        return os.pread(fd, 1, max(size - 1, 0))
    finally:
        os.close(fd)


def remove_stale_temp_files(directories: Iterable[Path]) -> list[Path]:
    """Startup recovery: delete memd's own leftover temp files. Returns what was removed."""
    removed: list[Path] = []
    for directory in directories:
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            continue
        own = f"{TEMP_MARKER}{_INSTANCE}-"  # a reload reopening a directory memd is writing: not stale
        for name in names:
            if is_temp_name(name) and own not in name:
                victim = directory / name
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(victim)
                    removed.append(victim)
        if removed:
            fsync_dir(directory)
    return removed


@dataclass(frozen=True, slots=True)
class FileWrite:
    """One durable change in a batch: append `data` to `path`, or replace `path` with it.

    A `guarded` replace is published only over `expected`, the bytes its batch was planned from (None: the file
    did not exist); anything else there raises OutsideChange. An append with `expected_size` that finds the file
    grown by someone else whose last line is still open starts on a new line instead of gluing onto it."""

    path: Path
    data: bytes
    append: bool
    guarded: bool = False
    expected: bytes | None = None
    expected_size: int | None = None


@dataclass(slots=True)
class _Staged:
    write: FileWrite
    tmp: Path
    fingerprint: Fingerprint
    published: bool = False
    holds_displaced: bool = False  # after an exchange, `tmp` names the file that was displaced


def apply_writes(writes: Iterable[FileWrite]) -> list[Fingerprint]:
    """Apply a batch (runs in a worker thread) and return one fingerprint per write, in order.

    Every replace is staged first (temp file written and fsynced), then published, then the appends are made.
    Guarded replaces go in all or none: a conflict undoes those already published and raises OutsideChange before
    any append, so the writer can plan the whole batch again; a failed append puts the displaced files back too,
    so a batch that fails leaves its guarded files as they were. Raises on the first failure."""
    writes = list(writes)
    staged: dict[int, _Staged] = {}
    published: list[_Staged] = []
    fps: list[Fingerprint] = []
    try:
        for i, w in enumerate(writes):
            if not w.append:
                staged[i] = _stage(w)
        for st in staged.values():
            _publish(st)
            published.append(st)
        for i, w in enumerate(writes):
            if w.append:
                fps.append(durable_append(w.path, w.data, expected_size=w.expected_size))
            else:
                fps.append(staged[i].fingerprint)
    except BaseException:
        for st in reversed(published):
            with contextlib.suppress(OSError):
                _unpublish(st)
        raise
    finally:
        _discard_temps(staged.values())
    return fps


def _stage(w: FileWrite) -> _Staged:
    directory = w.path.parent
    _refuse_symlinked_dir(directory)
    tmp = temp_name(w.path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC | _O_NOFOLLOW, 0o644)
    try:
        try:
            _write_all(fd, w.data)
            os.fsync(fd)
            st = os.fstat(fd)
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return _Staged(w, tmp, Fingerprint.of_stat(st))


def _publish(st: _Staged) -> None:
    w = st.write
    if w.guarded and _current_bytes(w.path) != w.expected:
        # Checked before memd's version becomes visible too: most outside edits are caught here, so nobody sees
        # (or appends to) a version that is about to be withdrawn.
        raise OutsideChange(w.path)
    if w.guarded and RENAMES.available_for(w.path):
        try:
            if w.expected is None:
                RENAMES.noreplace(st.tmp, w.path)
            else:
                RENAMES.exchange(st.tmp, w.path)
        except (FileExistsError, FileNotFoundError):  # created, or deleted, by someone else since planning
            raise OutsideChange(w.path) from None
        except OSError as exc:
            if not RENAMES.unsupported(exc, w.path):
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
        RENAMES.exchange(st.tmp, w.path)  # the displaced file back in place; ours is the temp now
        if appended:
            durable_append(w.path, appended)
    elif w.expected is None:
        os.unlink(w.path)
    else:  # the rename fallback displaced the old file for good: write the planned-from bytes back
        atomic_replace(w.path, w.expected + appended)
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
        fd = os.open(path, os.O_RDONLY | _O_CLOEXEC | _O_NOFOLLOW | _O_NONBLOCK)
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
        return read_bytes(path)
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
        fsync_dir(directory)


# --- the worker side of a batch and of a restore (run in memd's I/O threads, never on the loop) ------------


def write_batch(root: PinnedDir, writes: list[FileWrite]) -> list[Fingerprint]:
    """Runs in a worker thread. The workspace must still be the directory memd opened (a swapped-in symlink or
    directory fails the batch: nothing is written anywhere else). A tier directory someone removed is made again
    (the workspace root never is: a removed workspace stays removed), so one `rm -r warm` does not fail every
    later write. Raises OutsideChange when a guarded replace finds a person's version in place."""
    root.verify()
    for tier_dir in {w.path.parent for w in writes}:
        if not os.path.lexists(tier_dir):
            ensure_dir(tier_dir)
    return apply_writes(writes)


def restore_tree(pinned: PinnedDir, files: dict[str, bytes], paths: list[str]) -> list[str]:
    """Runs in a worker thread: write every file of `files`, remove the other files under `paths`. Every path is
    relative and normal (no `..`, `.`, empty part or leading `/`): any other is refused (EINVAL) before anything is
    written, so nothing ever lands outside the workspace."""
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
        if read_bytes(target) != data:
            ensure_dir(target.parent)
            atomic_replace(target, data)
            changed.append(rel)
    for top in paths:
        base = root / top
        candidates = (
            [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file() and not p.is_symlink())
        )
        for path in candidates:
            rel = str(path.relative_to(root))
            if rel not in files and not is_temp_name(path.name):
                path.unlink()
                fsync_dir(path.parent)
                changed.append(rel)
    return changed
