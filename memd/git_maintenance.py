"""Keeping a snapshot repository small: packing the loose objects snapshots leave behind. Blocking: run it in a
worker thread, holding the repository's lock.

memd runs every git command with `gc.auto=0` (a snapshot must never stop to repack, least of all under the
writer), so nothing else packs what snapshots write: each snapshot stores today's whole day file again as a new
loose object (at 200 writes/s a repository grew by 190 MB in 15 minutes). `maintain` looks at a repository's loose
objects (a directory listing, no git process) and runs `git gc` once they pass LOOSE_OBJECTS_MAX or
LOOSE_BYTES_MAX: in the pack, a day file's successive versions are stored as deltas of each other. gc runs at the
lowest CPU priority with one pack thread and one delta try per object (PACK_WINDOW); it keeps git's default
grace for unreachable objects (two weeks), so nothing a concurrent git has just written is pruned. A stopping
daemon ends a gc under way (memd.stoppable): git leaves the repository as it was, and the next gc starts over.
Imports memd.gitrepo and memd.stoppable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from memd.gitrepo import GitRepo
from memd.stoppable import Stoppable

LOOSE_OBJECTS_MAX = 1000  # git's own `gc --auto` waits for 6,700, but counts objects, not bytes
LOOSE_BYTES_MAX = 64 * 1024 * 1024
GC_TIMEOUT = 600.0  # a first gc of a large history, on a slow disk
# Objects a new one is tried as a delta of (git's default: 10). memd's files change by appending (days) and inserting
# (MEMORY.md), so git's order (by path, then size) puts the best base next to each version: one try finds it.
# Measured on 121 versions of a 7.5 MB day, MEMORY.md and context.json (`git gc`, one pack thread): 10.9 s of CPU
# with 10 tries, 4.3 s with one, the same 4.1 MB pack; 33 s and 4.7 s for a 36 MB day, the same pack. The soak's
# gc of its two days every ten minutes was a minute of CPU that the requests of that minute waited behind.
PACK_WINDOW = 1
_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class Loose:
    objects: int
    bytes: int

    @property
    def due(self) -> bool:
        return self.objects >= LOOSE_OBJECTS_MAX or self.bytes >= LOOSE_BYTES_MAX


def loose_objects(git_dir: Path) -> Loose:
    """The loose objects in `git_dir` and their size on disk (git's temporaries and packs not counted)."""
    count = size = 0
    objects = git_dir / "objects"
    for prefix in range(256):
        try:
            with os.scandir(objects / f"{prefix:02x}") as entries:
                for entry in entries:
                    if len(entry.name) in (38, 62) and _HEX.issuperset(entry.name):  # sha1 or sha256 names
                        count += 1
                        size += entry.stat(follow_symlinks=False).st_size
        except (FileNotFoundError, NotADirectoryError):
            continue
    return Loose(count, size)


def maintain(repo: GitRepo, stoppable: Stoppable | None = None) -> Loose | None:
    """`git gc` where the loose objects are due; returns what was loose before, or None when nothing was done
    (below the thresholds, or a repository memd did not make: its owner's git packs it as they configured).
    `stoppable`: a stopping daemon ends the gc (GitInterrupted) rather than waiting for it."""
    before = loose_objects(repo.git_dir)
    if not before.due or not repo.managed():
        return None
    repo.check_safe()  # not in the middle of a person's merge or rebase
    repo.run_niced(
        "-c", "pack.threads=1", "-c", f"pack.window={PACK_WINDOW}", "gc", "--quiet",
        timeout=GC_TIMEOUT, stoppable=stoppable,
    )  # fmt: skip
    return before
