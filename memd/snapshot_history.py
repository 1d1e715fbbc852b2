"""A workspace's snapshot history read back, and files restored from it: `history`, `show`, `diff` and `restore`
(the `history.*` and `snapshot.restore` methods, checkpoint records and undo).

Reads run in the snapshotter's git threads on the repository `Snapshotter.repo_for` opens (made if needed). A
restore writes through the workspace's writer and keeps the history: it commits the state as it is ("before
restore of ..."), rewrites the paths to their state at the commit, and commits the result ("restore of ...",
trailer `Memd-Restored-From`), holding the repository's lock and then the writer across all three, so no
debounced snapshot and no acknowledged write comes between them. Restored files that could not be committed
(cancelled, failed half-way) are marked for the next snapshot; a hot tier restored from before format 2 is split
again after its commit. Imports memd.snapshots, memd.git_history, memd.workspace and memd.errors.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from memd import git_history
from memd.errors import InvalidParams, MemdError, Unavailable
from memd.snapshots import COLD_FILE, COLD_RUN_TRAILER, Snapshotter
from memd.tiers import cold_store
from memd.workspace import Workspace

MARKS_LOOKED_AT = 20  # commits that changed cold/MEMORY.md whose run marks a restore tries, newest first


async def history(snapshots: Snapshotter, ws: Workspace, path: str | None, limit: int) -> list[dict[str, Any]]:
    repo = await snapshots.repo_for(ws)
    commits = await asyncio.get_running_loop().run_in_executor(snapshots.io, git_history.log, repo, path, limit)
    return [c.as_dict() for c in commits]


async def show(snapshots: Snapshotter, ws: Workspace, rev: str, path: str) -> bytes:
    repo = await snapshots.repo_for(ws)
    return await asyncio.get_running_loop().run_in_executor(snapshots.io, git_history.show, repo, rev, path)


async def diff(snapshots: Snapshotter, ws: Workspace, rev: str, rev2: str | None, paths: Sequence[str]) -> str:
    repo = await snapshots.repo_for(ws)
    return await asyncio.get_running_loop().run_in_executor(
        snapshots.io, git_history.diff, repo, rev, rev2, list(paths)
    )


async def restore(snapshots: Snapshotter, ws: Workspace, rev: str, paths: Sequence[str]) -> dict[str, Any]:
    """Bring `paths` back to their state at `rev`, through the writer, as a new commit (history kept)."""
    for p in paths:
        if p.split("/")[0] not in snapshots.config.paths or ".." in p.split("/"):
            raise InvalidParams(f"cannot restore {p!r}: paths must lie in {', '.join(snapshots.config.paths)}")
    repo = await snapshots.repo_for(ws)
    loop = asyncio.get_running_loop()
    commit = await loop.run_in_executor(snapshots.io, git_history.resolve, repo, rev)
    files = await loop.run_in_executor(snapshots.io, git_history.files_at, repo, commit, list(paths))
    marks: dict[str, bytes] = {}
    if COLD_FILE in files:  # the blocks a burst had appended when the commit was made are memd's again
        recorded = await loop.run_in_executor(
            snapshots.io, git_history.trailers_of_changes, repo, commit, COLD_FILE, COLD_RUN_TRAILER, MARKS_LOOKED_AT
        )
        mark = _run_mark_of(files[COLD_FILE], recorded)
        if mark is not None:
            marks[COLD_FILE] = mark
    state = snapshots.states[ws.name]
    async with state.lock:  # before, restore and after form one step: no debounced snapshot between them
        # A person's git holding index.lock is waited on without the writer; then the writer is held across
        # the three: a write acknowledged between the "before" commit and the rewrite would be overwritten
        # without ever having been committed.
        await loop.run_in_executor(snapshots.io, repo.wait_for_index_lock)
        async with ws.exclusive:
            before, _ = await snapshots.commit_locked(
                ws, state, f"before restore of {commit[:12]}", held=True, whole=True
            )
            if not before:
                raise Unavailable(
                    f"not restoring {ws.name!r}: its current state could not be committed first "
                    f"({state.last_error or 'unknown error'})"
                )
            try:
                changed = await ws.restore_files(files, list(paths), held=True, marks=marks)
                trailers = {"Memd-Restored-From": commit}
                after, created = await snapshots.commit_locked(
                    ws, state, f"restore of {commit[:12]}", trailers, held=True, whole=True
                )
            except BaseException:  # cancelled, or failed half-way: restored files may be uncommitted
                state.dirty |= {p.split("/")[0] for p in paths}  # the next snapshot or the flush commits them
                raise
    snapshots.maybe_split(ws)  # a restored hot/ from before format 2 is split again, after its commit
    if not created and changed:
        raise MemdError(f"restored files but could not commit the result: {state.last_error or 'unknown'}")
    return {"rev": commit, "before": before, "after": after, "changed": changed}


def _run_mark_of(data: bytes, recorded: Sequence[str]) -> bytes | None:
    """The first recorded run mark that names a run `data` ends with (memd.tiers.cold_store.run_named checks
    length, digest and shape), or None. The commit that made the file holds its mark; a merge or a person's commit
    holds none, and an older one's may still name the run the file ends with."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    for value in recorded:
        mark = value.encode("ascii", "replace")
        if cold_store.run_named(text, mark) is not None:
            return mark
    return None
