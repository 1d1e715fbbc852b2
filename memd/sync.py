"""Two-way sync of each workspace's snapshot history with its git remote: fetch, merge, publish, push.

One round, holding the workspace's repository lock (memd.snapshots; never its writer, but for the publish):
1. commit the workspace as it is (`before sync`);
2. fetch the remote's branch into a private ref;
3. integrate it: nothing to do when the remote is behind; a fast-forward when this side is behind; otherwise a
   merge commit of both (`git merge-tree` with memd's merge drivers, memd.merge_driver: warm days and learnings of
   both sides kept, this machine's hot session kept live, the other's in the merge's other parent). Nothing of it
   touches the work tree or leaves a merge in progress (memd.gitsync);
4. publish the merged files through the workspace's writer (`Workspace.publish_merged`): only memd's own files
   (gitsync.memd_file: never a path with `..`, `.` or `.git`; anything else the remote brings is a conflict), each
   merged again, in the worker, against the file as every acknowledged write left it, so a write made while the
   merge ran is kept, and written guarded: a file saved by someone since it was read is decided again, never
   overwritten. A file changed here in a way that cannot be folded in now stops the publish (nothing written, HEAD
   not moved): the next round commits it and merges it (or reports the conflict), so neither side's change is
   dropped. Then HEAD moves to the merge (compare-and-swap) and the workspace's change sink hears of the change
   (search, token counts, the next snapshot). A kill before HEAD moves leaves merged files that the next snapshot
   commits and the next merge recognises (entries and learnings are compared by content, so none is doubled);
5. push, never forced. A push refused because the remote moved meanwhile starts another round (3 at most).

What memd cannot merge (a learning edited differently on both sides, prose changed on both sides, a file memd does
not own changed on both sides) is a conflict: no merge commit, no push, the workspace serves its own version,
and `status` / `memd sync` show the files and the commands that settle it. The hot tier stays this machine's:
a fast-forward or a merge moves HEAD but leaves hot/ as it is, and the first time a round meets another machine's
session it logs a warm entry naming that session and its commit. The shared history carries the hot state of the
machine whose session changed last: this machine's hot files, left as it last committed them, are not committed
again until they change (`RepoState.hot_kept`), else two idle machines would each commit theirs after every sync.
Imports memd.snapshots, memd.snapshot_push (its `remote_for`), memd.workspace, memd.gitsync, memd.gitrepo,
memd.gitrepo_setup, memd.merge_driver, memd.fsio, memd.fsio_batch, memd.config and memd.errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from memd import fsio, fsio_batch, gitsync, snapshot_push
from memd.config import SnapshotConfig
from memd.errors import MemdError, Unavailable
from memd.gitrepo import HOT_FILES, GitRepo, redact_urls
from memd.gitrepo_setup import GitError, RemoteBranchLocked
from memd.merge_driver import kind_of, merge
from memd.snapshots import RepoState, Snapshotter
from memd.workspace import Workspace

log = logging.getLogger(__name__)
NETWORK_THREADS = 2  # fetches and pushes at once (each its own workspace's: a repository syncs one round at a time)
ROUNDS = 3  # fetch-merge-push rounds one sync may take while other machines keep pushing
PUBLISH_TRIES = 5  # decide-and-publish attempts while people keep saving the files being published
T = TypeVar("T")
Versions = dict[str, tuple[bytes | None, bytes | None]]  # path -> (at the commit left, at the commit reached)
Plan = dict[str, tuple[bytes | None, bytes | None]]  # path -> (what it holds now, what it becomes; None: removed)


@dataclass
class Published:
    """What a publish did: the files it changed, or (nothing changed) the files it could not fold in now."""

    written: list[str] = field(default_factory=list)
    held: dict[str, str] = field(default_factory=dict)  # path -> why it was left for the next round


class Syncer:
    def __init__(
        self,
        snapshots: Snapshotter,
        config: SnapshotConfig,
        io: Executor,
        python: str,
        attributes_file: Path,
    ) -> None:
        self.snapshots = snapshots
        self.config = config
        self._io = io
        # Fetch and push wait on the network (up to push_timeout_seconds each, a minute by default) on threads of
        # their own: on `io`, two workspaces syncing with a dead remote would take every git thread, and a snapshot
        # of any other workspace, which holds that workspace's writer while git stages and commits, would wait for
        # a thread, and its writes behind it.
        self._network = ThreadPoolExecutor(max_workers=NETWORK_THREADS, thread_name_prefix="memd-git-net")
        self._python = python
        self._attributes = attributes_file
        self._seen_sessions: dict[str, set[str]] = {}  # per workspace: other machines' sessions already logged
        self._turn = 0  # where the next scheduled run starts in the list of workspaces

    def reconfigure(self, config: SnapshotConfig) -> None:
        self.config = config

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._io, fn, *args)

    async def _over_network(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._network, fn, *args)

    def close(self) -> None:
        """memd is stopping: a fetch or push still waiting on the remote is left to its timeout, not waited for."""
        self._network.shutdown(wait=False, cancel_futures=True)

    async def sync_all(self) -> dict[str, str]:
        """Sync every tracked workspace (the scheduled job). Returns each one's state. Each workspace on its own:
        an unexpected failure of one is logged and shown in its state, and the others sync on; each run starts one
        workspace further, so a slow remote never always delays the same ones."""
        results: dict[str, str] = {}
        workspaces = self.snapshots.tracked()
        if not workspaces:
            return results
        start = self._turn % len(workspaces)
        self._turn = start + 1
        for ws in workspaces[start:] + workspaces[:start]:
            try:
                report = await self.sync(ws)
            except Exception as exc:  # a bug in one workspace's sync never stops the others'
                log.exception("workspace %s: sync failed unexpectedly", ws.name)
                report = {"state": "error", "error": redact_urls(f"sync failed unexpectedly: {exc!r}")}
                with contextlib.suppress(Exception):
                    self.snapshots.repo_state(ws).sync = {
                        **report,
                        "at": ws.clock.now().isoformat(timespec="seconds"),
                    }
            results[ws.name] = str(report.get("state"))
        return results

    async def sync(self, ws: Workspace) -> dict[str, Any]:
        """One sync of `ws` (up to ROUNDS rounds). Returns the report status shows; failures are in it, not raised."""
        if not self.config.enabled or not self.config.remote:
            raise Unavailable(
                "no remote to sync with: set [snapshot] remote (and sync = true to sync on a schedule); docs/sync.md"
            )
        state = self.snapshots.repo_state(ws)
        url = snapshot_push.remote_for(self.snapshots.config, ws.name)
        report: dict[str, Any] = {
            "state": "error",
            "remote": redact_urls(url),  # the URL may carry credentials (https://user:token@host/...)
            "at": ws.clock.now().isoformat(timespec="seconds"),
        }
        async with state.lock:
            try:
                for _ in range(ROUNDS):
                    outcome = await self._round(ws, state, url, report)
                    if outcome != "again":
                        break
                else:
                    report.update(
                        # a lock the remote still holds after every round is most likely one a person must remove
                        state="error" if report.get("locked") else "behind",
                        error=report.get("retry") or "the remote kept moving; the next sync goes on",
                    )
            except (GitError, MemdError, OSError) as exc:
                report.update(state="error", error=redact_urls(getattr(exc, "message", None) or str(exc)))
            finally:
                report.pop("retry", None)
                report.pop("locked", None)
        previous = state.sync
        report["merges"] = previous.get("merges", 0) + report.pop("merged", 0)
        report["syncs"] = previous.get("syncs", 0) + 1
        if report["state"] in ("conflict", "error") and previous.get("error") != report.get("error"):
            log.warning("workspace %s: sync %s: %s", ws.name, report["state"], report.get("error"))
        state.sync = report
        return report

    async def _round(self, ws: Workspace, state: RepoState, url: str, report: dict[str, Any]) -> str:
        report.pop("locked", None)
        repo = await self.snapshots.repo_locked(ws, state)
        head, _ = await self.snapshots.commit_locked(ws, state, "before sync")
        if not head and state.last_error:
            raise Unavailable(f"could not commit the workspace before syncing: {state.last_error}")
        timeout = self.config.push_timeout_seconds
        remote = await self._over_network(gitsync.fetch, repo, url, self.config.branch, timeout)
        report["remote_head"] = remote or None
        new = head
        if remote and remote != head and not (head and await self._ancestor(repo, remote, head)):
            if not head or await self._ancestor(repo, head, remote):
                new = remote  # this side is behind: a fast-forward
            else:
                new = await self._merge(repo, head, remote, report)
                if not new:
                    return "conflict"
                report["merged"] = report.get("merged", 0) + 1
            outcome = await self._publish(ws, repo, head, new, remote, report)
            if outcome != "done":
                return outcome
            await self._keep_hot(repo, state, head, new)
            await self._note_other_session(ws, repo, remote)
        report.update(state="ok", head=new or None, error=None, conflicts=[], resolve=[])
        if not new or new == remote:
            return "done"
        try:
            outcome = await self._over_network(gitsync.push, repo, url, self.config.branch, timeout)
        except RemoteBranchLocked as exc:  # held by a push at this moment, most often: the next round tries again
            report.update(state="behind", retry=exc.message, locked=True)
            return "again"
        if outcome == "diverged":
            return "again"
        state.push_state, state.push_error, state.pushed_head = "ok", "", new
        return "done"

    async def _keep_hot(self, repo: GitRepo, state: RepoState, old: str, new: str) -> None:
        """HEAD moved from this machine's `old` to `new`; where `new` holds another machine's hot files, note what
        this machine had committed of them (`RepoState.hot_kept`): its files still hold that, and committing them
        again before they change would only take the hot state back and forth between the machines."""
        if "hot" not in self.config.paths:
            return
        for path in HOT_FILES:
            # One kept already is what the files hold (the round's first commit checked): `old` then holds an
            # earlier machine's version, not this one's.
            mine = state.hot_kept.get(path) or await self._run(gitsync.blob, repo, old, path)
            if mine is not None and mine != await self._run(gitsync.blob, repo, new, path):
                state.hot_kept[path] = mine
            else:
                state.hot_kept.pop(path, None)

    async def _ancestor(self, repo: GitRepo, ancestor: str, descendant: str) -> bool:
        return await self._run(gitsync.is_ancestor, repo, ancestor, descendant)

    async def _merge(self, repo: GitRepo, head: str, remote: str, report: dict[str, Any]) -> str:
        """The merge commit of `head` and `remote`, or "" after recording a conflict in `report`."""
        await self._run(gitsync.write_attributes, self._attributes)
        await self._run(gitsync.install_drivers, repo, self._python)
        options = gitsync.driver_options(self._python, self._attributes)
        merged = await self._run(gitsync.merge_trees, repo, head, remote, options)
        if merged.unresolved:
            report.update(
                state="conflict",
                error="memd cannot merge "
                + ", ".join(sorted({c.path for c in merged.unresolved}))
                + " by its rules; this workspace keeps serving its own version and is not pushed until it is settled",
                conflicts=[{"path": c.path, "kind": c.kind, "message": c.message} for c in merged.unresolved],
                resolve=self._resolve_commands(repo, remote, [c.path for c in merged.unresolved]),
            )
            return ""
        message = (
            f"memd: sync merge of {remote[:12]}\n\n"
            f"Memd-Reason: sync\nMemd-Sync-Remote: {remote}\nMemd-Sync-Local: {head}\n"
        )
        return await self._run(gitsync.commit_tree, repo, merged.tree, [head, remote], message)

    def _resolve_commands(self, repo: GitRepo, remote: str, paths: list[str]) -> list[str]:
        git = f"git --git-dir={repo.git_dir} --work-tree={repo.work_tree}"
        name = repo.work_tree.name
        return [
            f"see the other side: {git} diff HEAD {remote[:12]} -- {' '.join(paths)}",
            f"either make this side's lines read as you want them everywhere (for example as the other side has "
            f"them: {git} show {remote[:12]}:{paths[0]}), then run `memd sync WORKSPACE`",
            f"or merge by hand: {git} merge {gitsync.SYNC_REF} (memd's own files merge themselves; fix the files "
            f"it lists, then {git} commit -a), then run `memd sync WORKSPACE` ({name})",
        ]

    async def _publish(
        self, ws: Workspace, repo: GitRepo, old: str, new: str, remote: str, report: dict[str, Any]
    ) -> str:
        """Bring the workspace's files from `old` to `new` through its writer (hot/ stays this machine's), merging
        in what was written since `old`; then move HEAD to `new`. Returns "done"; "conflict" (recorded in
        `report`) when `new` holds a file memd never writes; "again" when a file changed here meanwhile in a way
        that cannot be folded in now: then nothing is written and HEAD stays, so the next round commits that
        change and merges it with the remote's (a real conflict is then reported as one), never dropping either."""
        paths = [p for p in self.config.paths if p != "hot"]
        changed = await self._run(gitsync.changed_paths, repo, old, new, paths) if paths else []
        refused = [p for p in changed if not gitsync.memd_file(p)]
        if refused:
            report.update(
                state="conflict",
                error="the remote's history holds "
                + ", ".join(repr(p) for p in sorted(refused))
                + ", which memd does not write into a workspace (only its own tier files); this workspace keeps "
                "serving its own version and is not pushed until it is settled",
                conflicts=[
                    {"path": p, "kind": "REFUSED (not a memd file)", "message": f"memd does not write {p!r}"}
                    for p in sorted(refused)
                ],
                resolve=self._resolve_commands(repo, remote, sorted(refused)),
            )
            return "conflict"
        versions: Versions = {}
        for path in changed:
            versions[path] = (
                await self._run(gitsync.blob, repo, old, path),
                await self._run(gitsync.blob, repo, new, path),
            )
        published = await ws.publish_merged(lambda pinned: self._publish_files(pinned, versions)) if versions else None
        if published is not None and published.held:
            report["retry"] = (
                "changed here while the sync merged, not folded in yet: "
                + "; ".join(f"{p} ({why})" for p, why in sorted(published.held.items()))
                + "; the next sync merges them"
            )
            return "again"
        await self._run(gitsync.move_head, repo, new, old)
        written = published.written if published is not None else []
        tiers = frozenset(p.split("/")[0] for p in written)
        if tiers:  # the workspace's change sink: search, token counts, snapshots, checkpoints
            ws.sink.changed(ws, tiers, "sync")
        return "done"

    def _publish_files(self, pinned: fsio.PinnedDir, versions: Versions) -> Published:
        """Runs in a worker, holding the workspace's writer: decide what each file becomes and write it, guarded
        (contract 2: decided at publish): a file someone saved since it was read is not overwritten, everything is
        decided again from what it then holds (PUBLISH_TRIES times at most, then left for the next round)."""
        for _ in range(PUBLISH_TRIES):
            plan, held = self._decide(pinned.path, versions)
            if held:
                return Published(held=held)
            try:
                return Published(written=_write_plan(pinned, plan))
            except fsio_batch.OutsideChange:
                continue
        return Published(held={p: "saved again during each try of the publish" for p in versions})

    def _decide(self, root: Path, versions: Versions) -> tuple[Plan, dict[str, str]]:
        """What each file becomes: the commit reached's version where the file is still the commit left's, a merge
        of the two where memd can merge it cleanly, nothing where it already is what it should be. Returns the
        plan (path -> (bytes read now, bytes to write; None: remove)) and the files that changed here in a way that
        cannot be folded in (path -> why)."""
        plan: Plan = {}
        held: dict[str, str] = {}
        for path, (before, after) in versions.items():
            current = fsio.read_bytes(root / path)
            if current == after:
                continue
            if current == before:
                plan[path] = (current, after)
                continue
            kind = kind_of(path)
            if after is None or current is None or kind in (None, "hot"):
                held[path] = "deleted on one side, changed on the other" if None in (after, current) else "changed"
                continue
            result = merge(str(kind), before or b"", current, after)
            if not result.clean:
                held[path] = "; ".join(result.conflicts)
            elif result.data != current:
                plan[path] = (current, result.data)
        return plan, held

    async def _note_other_session(self, ws: Workspace, repo: GitRepo, remote: str) -> None:
        """Log, once per other machine's session, that its hot state was set aside and where it is."""
        raw = await self._run(gitsync.blob, repo, remote, "hot/context.json")
        try:
            doc = json.loads(raw) if raw else {}
        except ValueError:
            return
        session = str(doc.get("session_id") or "") if isinstance(doc, dict) else ""
        seen = self._seen_sessions.setdefault(ws.name, set())
        if not session or session == str(ws.hot.doc.get("session_id") or "") or session in seen:
            return
        seen.add(session)
        details = (
            ("session_id", session),
            ("task", str(doc.get("task") or "")),
            ("commit", remote),
            ("show", f"memd show {ws.name} {remote[:12]}:hot/context.json"),
        )
        try:
            await ws.write(lambda draft: draft.log("sync: another machine's session", details, "kept in history"))
        except MemdError as exc:
            log.warning("workspace %s: could not log the other machine's session: %s", ws.name, exc.message)


def _write_plan(pinned: fsio.PinnedDir, plan: Plan) -> list[str]:
    """Write `plan` (from `Syncer._decide`), every change guarded against what was read: replaces all or none
    (fsio_batch.apply_writes), then removals, each compared with what was read right before the unlink. Raises
    fsio_batch.OutsideChange when a file no longer holds what the plan was made from (the replaces then stay, already
    merged: deciding again leaves them as they are)."""
    pinned.verify()
    root = pinned.path
    for path in plan:
        if not gitsync.memd_file(path):  # checked before the fetch's objects got here too; never written
            raise OSError(errno.EINVAL, f"memd does not write {path!r} into a workspace", path)
    for top in {path.split("/")[0] for path in plan}:
        if (root / top).is_symlink():
            raise OSError(errno.ELOOP, f"{root / top} is a symlink; memd does not write a sync's files through it")
    writes = []
    for path, (current, data) in sorted(plan.items()):
        if data is not None:
            fsio.ensure_dir((root / path).parent)
            writes.append(fsio_batch.FileWrite(root / path, data, append=False, guarded=True, expected=current))
    fsio_batch.apply_writes(writes)
    written = [path for path, (_, data) in sorted(plan.items()) if data is not None]
    for path, (current, data) in sorted(plan.items()):
        if data is None:
            target = root / path
            if fsio.read_bytes(target) != current:
                raise fsio_batch.OutsideChange(target)
            os.unlink(target)
            fsio.fsync_dir(target.parent)
            written.append(path)
    return written
