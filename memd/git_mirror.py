"""A snapshot's own copy of the workspace, made in milliseconds under the writer, so that git reads and hashes
it after the writer is let go. Blocking: run it in a worker thread.

A snapshot must commit one state that no batch is half-way through, so git used to stage and commit under the
workspace's writer; hashing and compressing today's day file made that hold grow with the day (about 12 ms per
MB, 25 ms at 1 MB: every write arriving meanwhile waited, and the soak's p99 grew with its day file). Instead,
under the writer, `build` mirrors the snapshot paths into `<git dir>/memd-stage/`: a hard link for each file
memd replaces whole (hot, cold, archives: a later write puts a new file in place and leaves the linked one as it
was) or never writes, a copy of each warm day file memd may append to while git runs (the workspace's yesterday,
today and tomorrow: a day's file is appended to in place). Symbolic links are made again as links, never
followed; directories are walked without following links. Then staging and the commit read the mirror with
`GIT_WORK_TREE` pointing at it (`GitRepo.over`), outside the writer, and `remove` deletes it.

Hard links share the inode and its times, so a file that did not change since the last snapshot is not hashed
again (memd's git runs with `core.trustctime=false`: linking changes the inode's ctime). Where the git
directory is on another file system than the workspace (a separate repository in a state directory elsewhere)
no mirror is made (`build` returns None) and the snapshot stages under the writer as before.
Imports memd.gitrepo.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Container
from pathlib import Path

from memd.gitrepo import GitRepo

MIRROR_DIR = "memd-stage"
ROOT_FILES = (".gitignore",)  # at the workspace's top, its rules apply to the snapshot paths too
_SKIPPED = (".memd-tmp-", ".memd.lock")  # memd's own files: never committed (excluded by pathspec anyway)


def build(repo: GitRepo, live_days: Container[str]) -> Path | None:
    """(Under the writer.) The mirror of `repo`'s snapshot paths, or None where hard links cannot reach the
    workspace. `live_days`: names of the warm day files that are copied rather than linked. OSError when the mirror
    cannot be made (a full disk): the caller stages under the writer instead."""
    tree = repo.git_dir / MIRROR_DIR
    if os.stat(repo.git_dir).st_dev != os.stat(repo.work_tree).st_dev:
        return None
    remove(tree)
    os.mkdir(tree, 0o700)
    for name in ROOT_FILES:
        _place(repo.work_tree / name, tree / name, copy=False)
    for top in repo.paths:
        _mirror(repo.work_tree / top, tree / top, live_days if top == "warm" else ())
    return tree


def remove(tree: Path) -> None:
    """Delete a mirror (one left by a snapshot that did not finish included)."""
    if os.path.lexists(tree):
        shutil.rmtree(tree)


def _mirror(source: Path, target: Path, copied: Container[str]) -> None:
    try:
        st = os.lstat(source)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        _place(source, target, copy=False)
        return
    os.mkdir(target, 0o700)
    try:
        entries = list(os.scandir(source))
    except (FileNotFoundError, NotADirectoryError):  # gone while it was looked at
        return
    for entry in entries:
        if any(mark in entry.name for mark in _SKIPPED):
            continue
        if entry.is_dir(follow_symlinks=False):
            _mirror(Path(entry.path), target / entry.name, ())  # day files sit directly in warm/
        else:
            _place(Path(entry.path), target / entry.name, copy=entry.name in copied)


def _place(source: Path, target: Path, copy: bool) -> None:
    """`target` as a hard link to `source`, or a copy of it (`copy`, or where the link is refused); a symbolic
    link made again as one; anything else (a FIFO, a socket) left out, as git leaves it out. A source that
    vanished is skipped: the snapshot holds what the workspace holds."""
    try:
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
    except FileNotFoundError:
        return
