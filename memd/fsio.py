"""Durable file I/O primitives: with memd.fsio_append (the guarded append built on them) and memd.fsio_batch (the
guarded batch engine), the only modules that write workspace bytes to disk.

Contract 1 lives here: a function returns only after the bytes are fsynced (the file, and the directory when a
name was created or replaced). Any OSError, an fsync error above all, propagates to the caller: an fsync is
never retried and reported as success, because after a failed fsync the kernel may have dropped the dirty
pages. Symlinks are never followed for writes (O_NOFOLLOW on the file, lstat on its directory).
Imports nothing from memd.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import secrets
import stat
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
