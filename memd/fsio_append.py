"""The guarded append: a burst of learnings appended to cold/MEMORY.md only to the file its batch was planned from,
the mark that tells a restarted daemon which blocks at the end are its own (RUN_XATTR), and the undo of an append
when a later write of its batch fails.

Kept apart from memd.fsio's primitives, which know nothing of batches or runs of learnings. The append is checked on
the descriptor that appends, not by path, so a person's save between a check and the open never receives memd's
bytes; a save or another writer during the append is told apart afterwards, and memd's bytes are cut off again
unless they stand whole in the file at the path (then no re-plan writes a learning twice). Contract 1 holds here as
in memd.fsio: a function returns only after the bytes are fsynced, and any OSError propagates. memd.fsio_batch calls
it.
Imports memd.fsio.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

from memd.fsio import _O_CLOEXEC, _O_NOFOLLOW, _O_NONBLOCK, Fingerprint, _refuse_symlinked_dir, _write_all, matches

# An extended attribute memd sets on cold/MEMORY.md while a run of learnings it appended is there (see
# memd.tiers.cold_store.mark_for: the run's length and digest), so that a daemon stopped or killed in a
# burst knows at its next start which blocks at the end are its own. Set with every write of the file while a run
# is there (appends and replaces); a fold's new file has none. A person's save by rename, a copy or a file system
# without user attributes has none: nothing is taken for a run then.
RUN_XATTR = "user.memd.run"


def set_run_mark(fd: int, mark: bytes) -> None:
    """Set RUN_XATTR on an open file, made durable by its next fsync; best effort (no user attributes here: a run
    is then not known after a restart, and stays as sections of their own)."""
    with contextlib.suppress(OSError):
        os.setxattr(fd, RUN_XATTR, mark)


def run_mark(path: Path) -> bytes | None:
    """The RUN_XATTR of `path` (not followed if a link), or None."""
    try:
        return os.getxattr(path, RUN_XATTR, follow_symlinks=False)
    except OSError:  # none set, no such file, or no user attributes here (ENOTSUP)
        return None


class NotAsExpected(Exception):
    """A guarded append found the file other than the version its caller planned from; nothing was appended."""


def guarded_append(
    path: Path, data: bytes, expected: Fingerprint, mark: bytes | None = None
) -> tuple[Fingerprint, int]:
    """Append `data` and fsync, only to the file as `expected` says it was: checked on the descriptor that
    appends (a save between a check by path and the open would get memd's bytes otherwise). `mark`: set as
    RUN_XATTR with the append (made durable by its fsync; best effort). Returns the fingerprint after and the size
    before. Raises NotAsExpected, with nothing of memd's left in the file, when the file is another version, and
    when after the append the path names another file (a save by rename meanwhile: memd's bytes are cut off the
    old one) or the file no longer holds memd's bytes (rewritten in place); the batch plans again. A writer that
    appended during memd's append: when memd's bytes came last they are cut off again and NotAsExpected raised.
    When memd's bytes stand whole in the file at the path with others' around them (appended after them, or
    before and after; a tool that read them and saved the file by rename), the append stands, and the fingerprint
    returned is what memd's append made, which the file no longer is: its next reader reads it again, and no
    replan writes the learning twice."""
    _refuse_symlinked_dir(path.parent)
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | _O_CLOEXEC | _O_NOFOLLOW | _O_NONBLOCK)
    except FileNotFoundError:
        raise NotAsExpected(f"{path} is gone") from None
    try:
        st = _require_regular_open(fd, path)
        if not matches(expected, st):
            raise NotAsExpected(f"{path} changed")
        mine = st.st_size + len(data)
        if mark is not None:  # first: a crash after the write never leaves the run unmarked
            set_run_mark(fd, mark)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        except BaseException:
            with contextlib.suppress(OSError):  # nothing was acknowledged: leave no torn learning behind
                if os.fstat(fd).st_size <= mine:  # (nobody else's bytes after it)
                    os.ftruncate(fd, st.st_size)
            raise
        after = os.fstat(fd)
        stale = Fingerprint(mine, after.st_mtime_ns, after.st_ino)  # what memd's append made: not what is there now
        try:
            named = os.lstat(path).st_ino == after.st_ino
        except FileNotFoundError:
            named = False
        if not named:  # saved by rename meanwhile: memd's bytes went to a file nobody reads as MEMORY.md...
            if _holds_at(path, data, st.st_size):  # ...unless the tool that saved read them first and kept them
                return stale, st.st_size
            if after.st_size == mine:
                os.ftruncate(fd, st.st_size)
                os.fsync(fd)
            raise NotAsExpected(f"{path} was replaced during memd's append")
        if after.st_size == mine and os.pread(fd, len(data), st.st_size) == data:
            return Fingerprint.of_stat(after), st.st_size
        if after.st_size > mine and os.pread(fd, len(data), after.st_size - len(data)) == data:
            os.ftruncate(fd, after.st_size - len(data))  # someone's append went in first: memd's come off again
            os.fsync(fd)
            raise NotAsExpected(f"{path} was written to by someone else during memd's append")
        if after.st_size > st.st_size and data in os.pread(fd, after.st_size - st.st_size, st.st_size):
            return stale, st.st_size  # others' bytes around memd's, which stand whole: the next reader reads it all
        raise NotAsExpected(f"{path} was rewritten in place during memd's append")
    finally:
        os.close(fd)


def _holds_at(path: Path, data: bytes, offset: int) -> bool:
    """Does the file at `path` hold `data` at `offset`?"""
    try:
        fd = os.open(path, os.O_RDONLY | _O_CLOEXEC | _O_NOFOLLOW | _O_NONBLOCK)
    except OSError:
        return False
    try:
        return os.pread(fd, len(data), offset) == data
    finally:
        os.close(fd)


def _require_regular_open(fd: int, path: Path) -> os.stat_result:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise OSError(errno.EINVAL, f"{path} is not a regular file; memd only reads and writes regular files")
    return st


def undo_append(path: Path, size_before: int, after: Fingerprint) -> bool:
    """Cut off an append `durable_append` made (its result `after`) when a later write of the same batch failed,
    so the batch leaves nothing behind: only while the file is exactly as that append left it (same inode, same
    size; someone else's bytes after it are never cut). Returns whether it was cut."""
    fd = os.open(path, os.O_WRONLY | _O_CLOEXEC | _O_NOFOLLOW | _O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if st.st_ino != after.ino or st.st_size != after.size:
            return False
        os.ftruncate(fd, size_before)
        os.fsync(fd)
        return True
    finally:
        os.close(fd)
