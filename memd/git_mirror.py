"""A snapshot's own copy of the workspace, made in milliseconds under the writer, so that git reads and hashes
it after the writer is let go. Blocking: run it in a worker thread.

A snapshot must commit one state that no batch is half-way through, so git used to stage and commit under the
workspace's writer; hashing and compressing today's day file made that hold grow with the day (about 12 ms per
MB, 25 ms at 1 MB: every write arriving meanwhile waited, and the soak's p99 grew with its day file). Instead,
under the writer, `build` mirrors the snapshot paths into `<git dir>/memd-stage/`: a hard link for each file
memd replaces whole (hot, cold/PROPOSED.md, archives: a later write puts a new file in place and leaves the linked
one as it was) or never writes, a copy of each file memd may append to while git runs (the workspace's yesterday,
today and tomorrow in warm/: a day's file is appended to in place; cold/MEMORY.md: a burst of learnings is).
Symbolic links are made again as links, never followed; directories are walked without following links. Then
staging and the commit read the mirror with `GIT_WORK_TREE` pointing at it (`GitRepo.over`), outside the writer,
and `clear` deletes its files.

The mirror's directories are kept from one snapshot to the next (`clear` deletes everything but them; git records
no empty directory, so one the workspace no longer has commits nothing): making and deleting them at every
snapshot was 8 of the ~30 inodes a workspace's first sweep took and gave back, and on ext4 without a journal
(this project's machines) each new inode is found by stepping over every inode freed in the last minute (5
while its inode-table block is dirty: the kernel's `recently_deleted`), so a sweep of hundreds of workspaces
slowed down as it went.

A live file over PREFIX_COPY_BYTES is not copied under the writer either (copying today's 30 MB took the
writer for ~20 ms at every snapshot: the hour soak's p99 grew with its day): `build` records its size and its
last bytes and pins the file with a hard link, and `complete`, after the writer is let go, copies exactly that
many bytes from the pinned file, which appends since cannot have changed, nor a replace (cold/MEMORY.md is
replaced by every ordinary learning: the commit pairs it with the rest of the snapshot as it was under the
writer). A file rewritten in place meanwhile (shorter, other bytes where the recorded ones were: a person's save)
is copied whole as it is then, so the commit still holds a state the file had, never a prefix of a different one.

Hard links share the inode and its times, so a file that did not change since the last snapshot is not hashed
again (memd's git runs with `core.trustctime=false`: linking changes the inode's ctime). Where the git
directory is on another file system than the workspace (a separate repository in a state directory elsewhere)
no mirror is made (`build` returns None) and the snapshot stages under the writer as before.
Imports memd.gitrepo.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import time
from collections.abc import Container
from dataclasses import dataclass, field
from pathlib import Path

from memd.gitrepo import GitRepo

MIRROR_DIR = "memd-stage"
# cold/MEMORY.md is appended to in place during a burst of learnings (memd.tiers.cold_store), and an append a
# later write of its batch fails is cut off again: copied like a live day file, never linked.
LIVE_COLD = frozenset({"MEMORY.md"})
PREFIX_COPY_BYTES = 256 * 1024  # a live day file above this is copied after the writer is let go (`complete`)
_CHUNK = 256 * 1024  # where the kernel cannot copy: read and written in pieces this size
# copy_file_range's answers where the kernel or the file system cannot copy (before Linux 5.3, across file systems;
# EPERM: a container's seccomp filter)
_NO_KERNEL_COPY = frozenset({errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EPERM})
_TAIL = 64  # bytes before the recorded end that must still be there for the prefix to be the file's
# A copy's modification time is its source's, or this long before the copy was made when the source's is more
# recent: git counts a file as "racily clean" when its mtime is not older than the index file, in whole seconds
# (this git compares no nanoseconds), and hashes it again at the commit's refresh. A copy made and staged within
# one second had git hash today's 40 MB day twice per snapshot (0.08-0.16 s of CPU at every commit). A copy is
# memd's own and never written again once made, which is what the rule guards against.
RACY_MARGIN_NS = 2_000_000_000
ROOT_FILES = (".gitignore",)  # at the workspace's top, its rules apply to the snapshot paths too
_SKIPPED = (".memd-tmp-", ".memd.lock")  # memd's own files: never committed (excluded by pathspec anyway)
_PIN = ".memd-tmp-pin"  # a live file's link in the mirror while it waits for `complete`: one of memd's own names


@dataclass(frozen=True)
class Prefix:
    """A live day file to copy once the writer is let go: its first `size` bytes, which end with `tail`."""

    source: Path
    target: Path
    ino: int
    size: int
    tail: bytes
    mode: int
    pin: Path | None = None  # a hard link to the file as `build` found it, in the mirror under a skipped name


@dataclass
class Mirror:
    """A mirror being made: its directory, and the live day files still to copy (`complete`)."""

    tree: Path
    later: list[Prefix] = field(default_factory=list)
    dirs: set[Path] = field(default_factory=set)  # the directories it holds (`clear` keeps only these)


def build(repo: GitRepo, live_days: Container[str]) -> Mirror | None:
    """(Under the writer.) The mirror of `repo`'s snapshot paths, or None where hard links cannot reach the
    workspace. `live_days`: names of the warm day files that are copied rather than linked (the big ones later, by
    `complete`), as cold/MEMORY.md always is. OSError when the mirror cannot be made (a full disk): the caller
    stages under the writer."""
    tree = repo.git_dir / MIRROR_DIR
    if os.stat(repo.git_dir).st_dev != os.stat(repo.work_tree).st_dev:
        return None
    clear(tree)  # what a snapshot that did not finish left, too
    _mkdir(tree)
    mirror = Mirror(tree)
    for name in ROOT_FILES:
        _place(repo.work_tree / name, tree / name, copy=False)
    for top in repo.paths:
        live = live_days if top == "warm" else LIVE_COLD if top == "cold" else ()
        _mirror(repo.work_tree / top, tree / top, live, mirror)
    return mirror


def complete(mirror: Mirror) -> Path:
    """(After the writer is let go.) Copy the big live day files `build` recorded; returns the mirror's tree."""
    for prefix in mirror.later:
        _copy_prefix(prefix)
    return mirror.tree


def _copy_prefix(prefix: Prefix) -> None:
    try:
        if prefix.pin is not None and _copy_pinned(prefix, prefix.pin):
            return
    finally:
        if prefix.pin is not None:
            with contextlib.suppress(OSError):
                os.unlink(prefix.pin)
    try:
        fd = os.open(prefix.source, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:  # deleted since: the snapshot holds what the workspace holds
        return
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return
        size = prefix.size
        unchanged = (
            st.st_ino == prefix.ino
            and st.st_size >= size
            and os.pread(fd, len(prefix.tail), size - len(prefix.tail)) == prefix.tail
        )
        if not unchanged:  # saved over or rewritten since: the whole file as it is now, never a torn prefix
            size = st.st_size
        _vacate(prefix.target)
        with open(prefix.target, "wb") as out:
            _copy_range(fd, out.fileno(), size)
        os.chmod(prefix.target, stat.S_IMODE(prefix.mode))
        _date_copy(prefix.target, st)
    finally:
        os.close(fd)


def _copy_pinned(prefix: Prefix, pin: Path) -> bool:
    """Copy the recorded prefix from the file as `build` found it (appended to since, or replaced: either way its
    first `size` bytes are what they were). False when they are not (cut or rewritten in place since)."""
    fd = os.open(pin, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        size = prefix.size
        if st.st_size < size or os.pread(fd, len(prefix.tail), size - len(prefix.tail)) != prefix.tail:
            return False
        _vacate(prefix.target)
        with open(prefix.target, "wb") as out:
            _copy_range(fd, out.fileno(), size)
        os.chmod(prefix.target, stat.S_IMODE(prefix.mode))
        _date_copy(prefix.target, st)
        return True
    finally:
        os.close(fd)


def _copy_range(source: int, target: int, size: int) -> None:
    """The first `size` bytes of `source` into `target`, by the kernel where it can (the mirror is on the
    workspace's file system: hard links need that): read through Python, a day file of megabytes meant a
    megabyte buffer made and dropped per chunk at every snapshot, freed space the heap kept (the soak's RSS)."""
    offset = 0
    try:
        while offset < size:
            done = os.copy_file_range(source, target, size - offset, offset)
            if not done:  # the end of the file, or a file system that copies nothing (some FUSE ones): by hand
                break
            offset += done
    except (AttributeError, OSError) as exc:  # not Linux, or a file system that refuses it: copy by hand
        if isinstance(exc, OSError) and exc.errno not in _NO_KERNEL_COPY:
            raise
    while offset < size:
        chunk = os.pread(source, min(_CHUNK, size - offset), offset)
        if not chunk:
            return
        view = memoryview(chunk)
        while view:  # a short write (the disk filling up) is followed by the one that raises
            view = view[os.write(target, view) :]
        offset += len(chunk)


def remove(tree: Path) -> None:
    """Delete a mirror, directories and all (one that could not be made: a full disk)."""
    if os.path.lexists(tree):
        shutil.rmtree(tree)


def clear(tree: Path, keep: Container[Path] | None = None) -> None:
    """Delete every file and link of a mirror, keeping its directories for the next one (see the module
    docstring): those in `keep` (a mirror's `dirs`: what the workspace had), or all of them when None. A
    mirror's place taken by something that is not a directory is deleted."""
    try:
        st = os.lstat(tree)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(tree)
        return
    with os.scandir(tree) as entries:
        for entry in entries:
            if not entry.is_dir(follow_symlinks=False):
                os.unlink(entry.path)
            elif keep is None or Path(entry.path) in keep:
                clear(Path(entry.path), keep)
            else:  # the workspace has it no more: not kept for ever, however many come and go
                shutil.rmtree(entry.path)


def _mkdir(target: Path) -> None:
    """`target` as a directory: made, or kept from the last mirror."""
    try:
        os.mkdir(target, 0o700)
    except FileExistsError:
        if not stat.S_ISDIR(os.lstat(target).st_mode):  # `clear` leaves nothing else, but a mirror is never trusted
            os.unlink(target)
            os.mkdir(target, 0o700)


def _vacate(target: Path) -> None:
    """Nothing at `target`: a directory kept from the last mirror where the workspace now has a file goes."""
    if os.path.lexists(target):
        if stat.S_ISDIR(os.lstat(target).st_mode):
            shutil.rmtree(target)
        else:
            os.unlink(target)


def _mirror(source: Path, target: Path, copied: Container[str], mirror: Mirror) -> None:
    try:
        st = os.lstat(source)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        _place(source, target, copy=False)
        return
    _mkdir(target)
    mirror.dirs.add(target)
    try:
        entries = list(os.scandir(source))
    except (FileNotFoundError, NotADirectoryError):  # gone while it was looked at
        return
    for entry in entries:
        if any(mark in entry.name for mark in _SKIPPED):
            continue
        if entry.is_dir(follow_symlinks=False):
            _mirror(Path(entry.path), target / entry.name, (), mirror)  # day files sit directly in warm/
        elif entry.name in copied:
            _place_live(Path(entry.path), target / entry.name, mirror.later)
        else:
            _place(Path(entry.path), target / entry.name, copy=False)


def _place_live(source: Path, target: Path, later: list[Prefix]) -> None:
    """A file memd may append to: copied now when small, else its size and last bytes recorded for later."""
    try:
        st = os.lstat(source)
        if not stat.S_ISREG(st.st_mode) or st.st_size <= PREFIX_COPY_BYTES:
            _place(source, target, copy=True)
            return
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            tail = os.pread(fd, _TAIL, st.st_size - _TAIL)
        finally:
            os.close(fd)
    except FileNotFoundError:
        return
    later.append(Prefix(source, target, st.st_ino, st.st_size, tail, st.st_mode, _pin(source, target, st.st_ino)))


def _pin(source: Path, target: Path, ino: int) -> Path | None:
    """A hard link to `source` beside `target`, if it is still the file `ino` names: what `complete` copies from,
    so that a file replaced after the writer was let go (every ordinary learning replaces cold/MEMORY.md) is
    committed as it was under the writer, with the rest of the snapshot. None where the link is refused."""
    pin = target.with_name(f".{target.name}{_PIN}")
    try:
        _vacate(pin)
        os.link(source, pin, follow_symlinks=False)
        if os.lstat(pin).st_ino == ino:
            return pin
        os.unlink(pin)  # replaced between the look and the link
    except OSError:
        pass
    return None


def _place(source: Path, target: Path, copy: bool) -> None:
    """`target` as a hard link to `source`, or a copy of it (`copy`, or where the link is refused); a symbolic
    link made again as one; anything else (a FIFO, a socket) left out, as git leaves it out. A source that
    vanished is skipped: the snapshot holds what the workspace holds."""
    try:
        try:
            _place_once(source, target, copy)
        except (FileExistsError, IsADirectoryError):  # a directory kept from the last mirror: a file there now
            _vacate(target)
            _place_once(source, target, copy)
    except FileNotFoundError:
        return


def _place_once(source: Path, target: Path, copy: bool) -> None:
    st = os.lstat(source)
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(source), target)
    elif stat.S_ISREG(st.st_mode):
        if not copy:
            try:
                os.link(source, target, follow_symlinks=False)
                return
            except OSError as exc:  # protected_hardlinks (someone else's file), too many links
                if exc.errno not in (errno.EPERM, errno.EACCES, errno.EMLINK):
                    raise
        shutil.copyfile(source, target, follow_symlinks=False)
        os.chmod(target, stat.S_IMODE(st.st_mode))
        _date_copy(target, st)


def _date_copy(target: Path, source: os.stat_result) -> None:
    """Give a copy its source's times, never less than RACY_MARGIN_NS in the past (see there)."""
    when = min(source.st_mtime_ns, time.time_ns() - RACY_MARGIN_NS)
    os.utime(target, ns=(when, when), follow_symlinks=False)
