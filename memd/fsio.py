"""Durable file I/O: the only module that writes workspace bytes to disk.

Contract 1 lives here: a function returns only after the bytes are fsynced (the file, and the directory when a
name was created or replaced). Any OSError, an fsync error above all, propagates to the caller: an fsync is
never retried and reported as success, because after a failed fsync the kernel may have dropped the dirty
pages. Symlinks are never followed for writes (O_NOFOLLOW on the file, lstat on its directory).
Imports nothing from memd.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

TEMP_MARKER = ".memd-tmp-"
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
    tmp = directory / f".{path.name}{TEMP_MARKER}{os.getpid()}-{secrets.token_hex(4)}"
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


def durable_append(path: Path, data: bytes, mode: int = 0o644) -> Fingerprint:
    """Append `data` with O_APPEND and fsync. On failure the bytes this call added are cut off again."""
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
        for name in names:
            if is_temp_name(name):
                victim = directory / name
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(victim)
                    removed.append(victim)
        if removed:
            fsync_dir(directory)
    return removed


@dataclass(frozen=True, slots=True)
class FileWrite:
    """One durable change in a batch: append `data` to `path`, or replace `path` with it."""

    path: Path
    data: bytes
    append: bool


def apply_writes(writes: Iterable[FileWrite]) -> list[Fingerprint]:
    """Apply a batch in order (runs in a worker thread). Raises on the first failure; earlier ones are durable."""
    return [durable_append(w.path, w.data) if w.append else atomic_replace(w.path, w.data) for w in writes]
