"""Bringing the index in step with a workspace's files: the part that runs on the search thread. No asyncio.

`sync(source, tiers)` stats the files of those tiers (hot/context.json, cold/MEMORY.md, warm/ day files, the
month archives in warm/archive/), compares each with what the index recorded (size, mtime, inode), and re-indexes
only what changed: the file is read again (through the tiers' capped, no-symlink reader), parsed, and its rows
replaced; a file that is gone takes its rows with it. A day file that kept its inode and grew, with its bytes up
to its last entry unchanged (a hash says so), is indexed from that entry on: an append costs its own size, not
the day's; so is what a burst of learnings appends to cold/MEMORY.md (`_index_cold`). A file that cannot be read
(too large, a symlink, corrupt JSON) keeps its last good rows and is tried again when it changes. Only regular
files named as the tiers name them are read; nothing is ever written to a workspace. Imports memd.archive,
memd.fsio, the tier formats and memd.search's documents and store.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from memd import archive, fsio
from memd.errors import MemdError
from memd.search import documents
from memd.search.documents import DayTail, Doc
from memd.search.store import FileState, Store
from memd.tiers import cold_format, hot_format, read_tier_file, warm_format

log = logging.getLogger(__name__)
ALL_TIERS = frozenset({"hot", "warm", "cold"})
# The hot tier's two files (the article's session fields; memd's own notes, summary and checkpoint records): each
# is indexed for whatever notes, decisions or summary it holds, so a file from before the split is searched too.
HOT_FILES = ("hot/context.json", f"hot/{hot_format.OWN_FILE}")
COLD_FILE = "cold/MEMORY.md"
PROPOSALS_FILE = "cold/PROPOSED.md"  # the cold tier's proposals (memd.promote): searched, never in the context
_ARCHIVE_NAME = re.compile(r"[0-9]{4}-[0-9]{2}(?:\.[1-9][0-9]{0,5})?\.md\.gz")  # memd.archive's file names


@dataclass(frozen=True)
class Source:
    """What the search thread needs of a workspace, copied on the loop: never the live Workspace object."""

    name: str
    root: Path
    pinned: fsio.PinnedDir
    hot_max: int
    cold_max: int
    warm_max: int
    archive_max: int


@dataclass
class Outcome:
    files: int = 0  # files (re)indexed
    documents: int = 0
    errors: int = 0
    stopped: bool = False


def _state(st: os.stat_result) -> FileState:
    return FileState(st.st_size, st.st_mtime_ns, st.st_ino)


def _regular(path: Path) -> os.stat_result | None:
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return st if stat.S_ISREG(st.st_mode) else None


def _listing(directory: Path, keep: re.Pattern[str] | None) -> dict[str, os.stat_result]:
    out: dict[str, os.stat_result] = {}
    try:
        if stat.S_ISLNK(os.lstat(directory).st_mode):
            return out  # what a symlinked tier directory points at is not this workspace's
        with os.scandir(directory) as it:
            for entry in it:
                name = entry.name
                if not (keep.fullmatch(name) if keep else warm_format.parse_day_filename(name)):
                    continue
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(st.st_mode):
                    out[entry.name] = st
    except (FileNotFoundError, NotADirectoryError):
        pass
    return out


def present(source: Source, tiers: frozenset[str]) -> dict[str, os.stat_result]:
    """The indexable files of `tiers` as they are now: relative path -> lstat."""
    found: dict[str, os.stat_result] = {}
    for hot_file in HOT_FILES if "hot" in tiers else ():
        if (st := _regular(source.root / hot_file)) is not None:
            found[hot_file] = st
    for cold_file in (COLD_FILE, PROPOSALS_FILE) if "cold" in tiers else ():
        if (st := _regular(source.root / cold_file)) is not None:
            found[cold_file] = st
    if "warm" in tiers:
        warm = source.root / "warm"
        found |= {f"warm/{name}": st for name, st in _listing(warm, None).items()}
        archived = _listing(warm / archive.ARCHIVE_DIR, _ARCHIVE_NAME)
        found |= {f"warm/archive/{name}": st for name, st in archived.items()}
    return found


def _tier_of(file: str) -> str:
    return file.split("/", 1)[0]


def sync(store: Store, source: Source, tiers: frozenset[str], stop: Callable[[], bool] = lambda: False) -> Outcome:
    """Re-index what changed in `tiers` of one workspace (see the module docstring). `stop` is asked between
    files (memd is stopping): what is left stays as it was and is found changed at the next sync."""
    outcome = Outcome()
    try:
        source.pinned.verify()
    except OSError as exc:  # a swapped-in directory: index nothing from it, keep what was indexed
        log.warning("search: not indexing workspace %s: %s", source.name, exc.strerror or exc)
        outcome.errors += 1
        return outcome
    root = str(source.root)
    if store.root_of(source.name) != root:
        if store.root_of(source.name) is not None:
            log.info("search: workspace %s is another directory now; indexing it afresh", source.name)
        store.drop_workspace(source.name)
        store.set_root(source.name, root)
        tiers = ALL_TIERS
    known = {f: s for f, s in store.files(source.name).items() if _tier_of(f) in tiers}
    now = present(source, tiers)
    for file in known.keys() - now.keys():
        store.drop_file(source.name, file)
        outcome.files += 1
    for file, st in sorted(now.items()):
        if stop():
            outcome.stopped = True
            break
        state = _state(st)
        before = known.get(file)
        if before is not None and before.same_file(state):
            continue
        try:
            outcome.documents += _index_file(store, source, file, state, before)
        except (OSError, MemdError) as exc:  # unreadable now: keep the last good rows, retry when it changes
            message = exc.message if isinstance(exc, MemdError) else str(exc)
            store.mark_file(source.name, file, FileState(state.size, state.mtime_ns, state.ino, error=message))
            outcome.errors += 1
        outcome.files += 1
    return outcome


def _index_file(store: Store, source: Source, file: str, state: FileState, before: FileState | None) -> int:
    path = source.root / file
    if file in HOT_FILES:
        data = read_tier_file(path, source.hot_max) or b""
        doc = hot_format.parse(data, file) if data.strip() else hot_format.empty_doc()
        return store.replace_file(source.name, file, state, documents.hot(doc, data.decode("utf-8", "replace")))
    if file == COLD_FILE:
        return _index_cold(store, source, state, before)
    if file == PROPOSALS_FILE:
        text = (read_tier_file(path, source.cold_max) or b"").decode("utf-8", "replace")
        return store.replace_file(source.name, file, state, documents.proposals(text))
    if file.startswith("warm/archive/"):
        return store.replace_file(source.name, file, state, _archived(path, source.archive_max))
    return _index_day(store, source, file, state, before)


def _grown(
    path: Path, cap: int, state: FileState, before: FileState | None
) -> tuple[bytes, hashlib.blake2b, DayTail] | None:
    """What follows the point `before` indexed a file up to (its tail), when the file kept its inode and its bytes
    before that point (the hash `before` recorded says so): (those bytes, the hash so far, to go on with, the
    tail). Only the tail is read into memory; the bytes before it are hashed as they are read, through one small
    buffer (a day of megabytes read whole at every pass was a buffer of its size made and dropped every
    index_max_wait_seconds under steady writes: heap the daemon kept). None: read the file whole."""
    if before is None or before.error is not None or before.tail is None or before.prefix_hash is None:
        return None
    if before.ino != state.ino:
        return None
    digest = hashlib.blake2b(digest_size=16)
    tail = read_tier_file(path, cap, before.tail.offset, digest.update) or b""
    if digest.digest() != before.prefix_hash or before.tail.offset + len(tail) < before.size:
        return None
    return tail, digest, before.tail


def _index_day(store: Store, source: Source, file: str, state: FileState, before: FileState | None) -> int:
    path = source.root / file
    day = file.removeprefix("warm/").removesuffix(".md")
    grown = _grown(path, source.warm_max, state, before)
    if grown is not None:  # only appended to: index from the last entry on
        tail, digest, last = grown
        docs, resumed = documents.warm_day(tail, day, last)
        digest.update(memoryview(tail)[: resumed.offset - last.offset])
        done = FileState(state.size, state.mtime_ns, state.ino, resumed, digest.digest())
        return store.replace_file(source.name, file, done, docs, from_line=last.line)
    data = read_tier_file(path, source.warm_max) or b""
    docs, end = documents.warm_day(data, day)
    digest = hashlib.blake2b(memoryview(data)[: end.offset], digest_size=16)
    done = FileState(state.size, state.mtime_ns, state.ino, end, digest.digest())
    return store.replace_file(source.name, file, done, docs)


def _index_cold(store: Store, source: Source, state: FileState, before: FileState | None) -> int:
    """cold/MEMORY.md: what a burst of learnings appended (blocks of one learning, memd.tiers.cold_format) is
    indexed alone, when the file kept its inode and its bytes up to where it was indexed (a hash says so): a
    burst costs the index what it appended, not the file again after every batch (the soak with learnings: the
    search thread's diff of a growing MEMORY.md took the CPU from every request). Anything else appended (a
    person's `>>` of lines under the last heading), and every other change (an insertion, a fold, a save), is
    read whole and compared with what is indexed (Store.replace_file)."""
    path = source.root / COLD_FILE
    grown = _grown(path, source.cold_max, state, before)
    if grown is not None:
        tail, digest, last = grown
        added = tail.decode("utf-8", "replace")
        if added.startswith("\n") and cold_format.parse_appended(added) is not None:
            docs = [replace(d, line_start=d.line_start + last.line, line_end=d.line_end + last.line)
                    for d in documents.cold(added)]  # fmt: skip
            digest.update(tail)
            end = DayTail(last.offset + len(tail), last.line + tail.count(b"\n"))
            done = FileState(state.size, state.mtime_ns, state.ino, end, digest.digest())
            return store.replace_file(source.name, COLD_FILE, done, docs, from_line=last.line + 1)
    data = read_tier_file(path, source.cold_max) or b""
    whole = None
    if data.endswith(b"\n"):  # an append starts on a line of its own: indexed alone next time
        whole = DayTail(len(data), data.count(b"\n")), hashlib.blake2b(data, digest_size=16).digest()
    done = FileState(state.size, state.mtime_ns, state.ino, *(whole or (None, None)))
    return store.replace_file(source.name, COLD_FILE, done, documents.cold(data.decode("utf-8", "replace")))


def _archived(path: Path, max_bytes: int) -> list[Doc]:
    """The entries of every day an archive file holds (the last copy of a day, when it holds one twice)."""
    days = {d.name: d for d in archive.read_archive_days(path, max_bytes)}
    docs: list[Doc] = []
    for name, day in sorted(days.items()):
        parsed = warm_format.parse_day_filename(name)
        if parsed is not None:
            docs += documents.warm_day(day.data, parsed.isoformat())[0]
    return docs
