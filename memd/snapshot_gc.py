"""The `snapshot-gc` job: packing the loose objects of each snapshot repository memd made, where snapshots have
piled them up (memd.git_maintenance says when and how). Drives a Snapshotter through its public methods
(`tracked`, `states`), as memd.snapshot_push does. Imports memd.snapshots, memd.git_maintenance,
memd.gitrepo_setup, memd.errors and memd.stoppable.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Executor

from memd import git_maintenance
from memd.errors import StorageError
from memd.gitrepo_setup import GitError, GitInterrupted
from memd.snapshots import Snapshotter
from memd.stoppable import Stoppable

log = logging.getLogger(__name__)


async def maintain_all(snapshots: Snapshotter, executor: Executor, stoppable: Stoppable) -> dict[str, str]:
    """Pack each repository whose loose objects are due. One repository at a time, holding its lock (its
    snapshots wait, writes do not), in `executor`: a gc may take seconds and must not hold up the snapshot
    threads. A repository without a commit since the last look is not looked at again. A stop ends the gc under
    way through `stoppable`, so that the shutdown snapshot does not wait for it, and starts no other."""
    results: dict[str, str] = {}
    loop = asyncio.get_running_loop()
    for ws in snapshots.tracked():
        name = ws.name
        state = snapshots.states[name]
        if state.repo is None or state.commits == state.packed_at_commits:
            continue
        if stoppable.stopping:
            break
        async with state.lock:
            repo, state.packed_at_commits = state.repo, state.commits
            if repo is None:
                continue
            try:
                ws.check_identity()
                before = await loop.run_in_executor(executor, git_maintenance.maintain, repo, stoppable)
            except GitInterrupted:
                log.info("workspace %s: packing the snapshot repository ended: memd is stopping", name)
                results[name] = "interrupted"
                break
            except (GitError, StorageError, OSError) as exc:
                message = getattr(exc, "message", None) or str(exc)
                log.warning("workspace %s: packing the snapshot repository failed: %s", name, message)
                results[name] = "error"
                continue
        if before is not None:
            state.gcs += 1
            state.last_gc_at = ws.clock.now().isoformat(timespec="seconds")
            log.info(
                "workspace %s: packed %d loose objects (%.1f MiB) of %s", name, before.objects,
                before.bytes / (1 << 20), repo.git_dir,
            )  # fmt: skip
            results[name] = "packed"
    return results
