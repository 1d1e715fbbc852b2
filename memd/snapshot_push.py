"""Pushing each workspace's snapshot history to its remote (`snapshot.remote`, `{name}` replaced by the
workspace's name): the `snapshot-push` job (without `snapshot.sync`) and the `snapshot.push` method.

A push is a fast-forward of the remote's branch to HEAD, never forced, made without the repository's lock (it
only reads refs and objects, and may take a minute) and only when HEAD moved since the last one that went
through. A remote that has commits the workspace lacks stops the pushes of that workspace (`diverged`, with the
commands that reconcile it in status) until a person reconciles it and asks again (`reset_push`); memd.sync
merges instead. Outcomes and errors go to each workspace's `RepoState` (status shows them), a remote's
credentials never. Imports memd.snapshots, memd.gitrepo,
memd.gitrepo_setup and memd.config.
"""

from __future__ import annotations

import asyncio
import logging

from memd.config import SnapshotConfig
from memd.gitrepo import redact_urls
from memd.gitrepo_setup import GitError
from memd.snapshots import Snapshotter, head_or_empty

log = logging.getLogger(__name__)


def remote_for(config: SnapshotConfig, name: str) -> str:
    return config.remote.replace("{name}", name)


async def push_all(snapshots: Snapshotter) -> dict[str, str]:
    results: dict[str, str] = {}
    if not snapshots.config.remote:
        return results
    loop = asyncio.get_running_loop()
    for ws in snapshots.tracked():
        name = ws.name
        state = snapshots.states[name]
        if state.repo is None:
            continue
        if state.push_state == "diverged":
            results[name] = "diverged"
            continue
        try:  # no repository lock: a push only reads refs and objects, and may take a minute
            repo = state.repo
            head = await loop.run_in_executor(snapshots.io, head_or_empty, repo)
            if not head or head == state.pushed_head:
                continue
            config = snapshots.config
            outcome = await loop.run_in_executor(
                snapshots.io, repo.push, remote_for(config, name), config.branch, config.push_timeout_seconds
            )
        except (GitError, OSError) as exc:
            state.push_state, state.push_error = "error", redact_urls(getattr(exc, "message", str(exc)))
            results[name] = "error"
            continue
        state.push_state = outcome
        if outcome == "ok":
            state.pushed_head, state.push_error = head, ""
        else:
            config = snapshots.config  # as it is now: a reload may have come while the push ran
            state.push_error = redact_urls(
                f"{remote_for(config, name)} has commits this workspace lacks; memd stopped pushing (it never "
                f"forces). Reconcile with a git pull into memd's repository: git --git-dir={repo.git_dir} "
                f"--work-tree={ws.root} pull --no-rebase {remote_for(config, name)} {config.branch}, "
                f"then `memd push {name}`"
            )
            log.warning("workspace %s: push diverged: %s", name, state.push_error)
        results[name] = outcome
    return results


def reset_push(snapshots: Snapshotter, name: str) -> None:
    """Let a diverged or failing workspace push again (after a person reconciled it)."""
    state = snapshots.states.get(name)
    if state is not None and state.push_state in ("diverged", "error"):
        state.push_state = ""
