"""The three memory tiers: pure formats and their stores, and the one way a store reads its file."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

from memd.errors import CorruptFile

MIB = 1 << 20
# Per-tier caps on what memd reads into memory ([limits] in the config; these are its defaults). A tier file is
# read whole and kept in memory, and a hot file is rendered and counted on every change: a file past its cap is
# refused before a byte of it is read.
HOT_MAX_BYTES = 4 * MIB
COLD_MAX_BYTES = 16 * MIB
WARM_DAY_MAX_BYTES = 64 * MIB
DEFAULT_MAX_BYTES = COLD_MAX_BYTES  # for a caller not yet told its tier's cap

_O_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
_CHUNK = 1 << 20
_SKIP_CHUNK = 256 * 1024  # read_tier_file's `skipped` bytes go through one buffer this size


def read_tier_file(
    path: Path,
    max_bytes: int = DEFAULT_MAX_BYTES,
    offset: int = 0,
    skipped: Callable[[memoryview], object] | None = None,
) -> bytes | None:
    """A store's file (from `offset` on), or None when absent. `skipped`, when given, is fed the bytes before
    `offset` (fewer where the file is shorter now), read from the same open file in pieces through one buffer: a
    digest of what the caller already holds costs no copy of it (the search indexer checks a day file's prefix).

    Anything memd must not read through — a symlink (the file or its directory), a FIFO, a device — cannot read,
    or a file larger than `max_bytes` raises CorruptFile, which keeps the last good state in memory and refuses
    writes until a person fixes it. The size is checked with fstat on the opened file before anything is read,
    and the read stops past the cap, so a file that grows meanwhile is refused too, never read whole."""
    try:
        if path.parent.is_symlink():
            raise OSError(errno.ELOOP, "its directory is a symlink")
        try:
            fd = os.open(path, _O_FLAGS)  # O_NONBLOCK: a FIFO planted here must fail, not hang the loop
        except FileNotFoundError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(errno.EINVAL, "not a regular file")
            if st.st_size > max_bytes:
                raise _TooLarge(st.st_size)
            if skipped is not None:
                _feed(fd, min(offset, st.st_size), skipped)
            return _read_capped(fd, offset, st.st_size, max_bytes)
        finally:
            os.close(fd)
    except _TooLarge as exc:
        raise CorruptFile(
            f"{path} is {_size(exc.size)}, over memd's cap of {_size(max_bytes)} for this file ([limits] in the "
            "config); memd does not read it and will not overwrite it: trim or move it, or raise the cap"
        ) from None
    except OSError as exc:
        raise CorruptFile(
            f"{path} cannot be read ({exc.strerror or exc}): memd reads and writes only regular files, never "
            "through symlinks; replace it with a regular file"
        ) from None


def read_tier_start(path: Path, size: int) -> bytes | None:
    """The first `size` bytes of a store's file, read as `read_tier_file` reads (never through a symlink, only a
    regular file); None when it cannot be read or is shorter. For a store that let go of a start it wrote and reads
    it back to check against what it kept of it (memd.tiers.cold_store.Released)."""
    try:
        if path.parent.is_symlink():
            return None
        fd = os.open(path, _O_FLAGS)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            chunks: list[bytes] = []
            pos = 0
            while pos < size:
                chunk = os.pread(fd, min(size - pos, _CHUNK), pos)
                if not chunk:
                    return None
                chunks.append(chunk)
                pos += len(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)
    except OSError:
        return None


class _TooLarge(Exception):
    def __init__(self, size: int) -> None:
        self.size = size


def _read_capped(fd: int, offset: int, size: int, max_bytes: int) -> bytes:
    chunks: list[bytes] = []
    pos = offset
    want = max(size - offset, 0) + 1  # one byte more than fstat saw: growth since shows at once
    while True:
        chunk = os.pread(fd, want, pos)
        if not chunk:
            return b"".join(chunks)
        pos += len(chunk)
        if pos > max_bytes:  # grew past the cap after the fstat
            raise _TooLarge(pos)
        chunks.append(chunk)
        want = _CHUNK


def _feed(fd: int, end: int, into: Callable[[memoryview], object]) -> None:
    buffer = bytearray(min(end, _SKIP_CHUNK))
    view = memoryview(buffer)
    pos = 0
    while pos < end:
        got = os.preadv(fd, [view[: min(len(buffer), end - pos)]], pos)
        if not got:
            return  # shorter than fstat said: what was fed is all there is
        into(view[:got])
        pos += got


def _size(n: int) -> str:
    return f"{n / MIB:.1f} MiB ({n:,} bytes)" if n >= MIB else f"{n:,} bytes"
