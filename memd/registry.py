"""The set of live workspaces, kept in sync with disk: configured ones, discovered ones, and outside edits.

Watcher threads only post (root, tier) hints onto the loop; here each hint is debounced per workspace and then
`Workspace.refresh()` decides, by fingerprint, whether anything really changed — memd's own writes change
nothing and cost nothing. A stat-based reconcile of every workspace (`reconcile`) covers events the kernel or
watchdog dropped. Discovery roots are rescanned on any event directly under them and on every reconcile.

One writer per workspace: a directory is served under one name. The factory takes the workspace's own lock
(another daemon holding it makes that workspace "refused": reported in status, retried by every reconcile, the
others served); a discovered directory that is also a configured workspace (symlinks and `..` resolved) is
skipped, the configured name wins. Imports memd.workspace, memd.watcher, memd.debounce, memd.config,
memd.config_checks and memd.errors.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memd.changes import ChangeSink, NoSink
from memd.config import WORKSPACE_NAME, Config, WorkspaceConfig
from memd.config_checks import directory_identity
from memd.debounce import Debouncer
from memd.errors import MemdError, StartupError
from memd.watcher import TIERS, Watcher
from memd.workspace import Workspace

log = logging.getLogger(__name__)

Factory = Callable[[WorkspaceConfig], Workspace]  # opens it and takes its lock; StartupError if it cannot
Release = Callable[[Workspace], None]  # lets go of the lock the factory took


@dataclass
class SyncStats:
    adopted: int = 0  # outside changes taken in
    hints: int = 0  # watcher hints received
    reconciles: int = 0
    last_reconcile: str = ""
    discovery_conflicts: dict[str, str] = field(default_factory=dict)


def held_elsewhere(exc: StartupError) -> bool:
    """Did opening fail because another daemon holds the workspace's lock (not a fault of this config)?"""
    return bool(exc.data and "held_by" in exc.data)


class Registry:
    def __init__(
        self, config: Config, factory: Factory, release: Release = lambda _ws: None, sink: ChangeSink | None = None
    ) -> None:
        """`factory` opens a workspace (giving it the same `sink`); `sink` hears registrations and adopted
        outside edits."""
        self.config = config
        self.sink: ChangeSink = sink or NoSink()
        self._factory = factory
        self._release = release
        self.workspaces: dict[str, Workspace] = {}
        self.discovered: set[str] = set()
        self.refused: dict[str, str] = {}  # configured workspaces another daemon holds: name -> why
        self._file_errors: dict[tuple[str, str], str] = {}  # (workspace, tier) -> why its writes are refused
        self._tasks: set[asyncio.Task[set[str]]] = set()  # adoptions in flight (a reference keeps each alive)
        self._refused_configs: dict[str, WorkspaceConfig] = {}
        self._by_root: dict[Path, str] = {}
        self._identity: dict[Workspace, tuple[int, int] | str] = {}
        self.stats = SyncStats()
        self.watcher: Watcher | None = None
        self._rewatch: set[Path] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._debounce: Debouncer[str] = Debouncer(
            config.watch.settle_seconds, config.watch.max_wait_seconds, self._adopt
        )
        self._discovery_debounce: Debouncer[Path] = Debouncer(
            config.watch.settle_seconds, config.watch.max_wait_seconds, lambda _root, _r: self.discover()
        )

    # --- lifecycle -------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Open configured and discovered workspaces; start watching (call on the loop)."""
        self._loop = asyncio.get_running_loop()
        if self.config.watch.enabled:
            self.watcher = Watcher(self._hint_from_thread, self.config.watch.polling_interval_seconds)
            self.watcher.start()
        for ws_config in self.config.workspaces.values():
            try:
                self.add(ws_config)
            except StartupError as exc:
                if not held_elsewhere(exc):
                    raise
                self._refuse(ws_config, exc.message)
        for root in self.config.discovery.roots:
            if self.watcher is not None and root.is_dir():
                self.watcher.watch_discovery_root(root)
        self.discover()

    async def close(self) -> None:
        self._debounce.flush()
        await asyncio.gather(*(ws.close() for ws in self.workspaces.values()))
        for ws in self.workspaces.values():
            self._release(ws)
        if self.watcher is not None:
            self.watcher.stop()

    def add(self, ws_config: WorkspaceConfig) -> Workspace:
        return self._register(self._factory(ws_config))

    def _register(self, ws: Workspace) -> Workspace:
        self.workspaces[ws.name] = ws
        self._by_root[ws.root] = ws.name
        self._identity[ws] = directory_identity(ws.root)
        self._log_file_errors(ws)
        self.sink.registered(ws)  # served from now on (a reload's prepared workspaces are not yet)
        if self.watcher is not None:
            self.watcher.watch_workspace(ws.root)
        return ws

    async def remove(self, name: str) -> None:
        ws = self.workspaces.pop(name)
        if self._by_root.get(ws.root) == name:
            del self._by_root[ws.root]
        self._identity.pop(ws, None)
        self.discovered.discard(name)
        self._debounce.cancel(name)
        if self.watcher is not None and ws.root not in self._by_root:
            self.watcher.unwatch(ws.root)
        await ws.close()
        # close() waits for queued writes only: a restore or sweep may still hold the writer, rewriting files. A
        # reload that serves the same directory again (another name, another encoding) must not let the new
        # workspace write before that ends: its acknowledged writes would be rewritten.
        await ws.exclusive.acquire()
        ws.exclusive.release()
        self._release(ws)

    def _refuse(self, ws_config: WorkspaceConfig, why: str) -> None:
        if self.refused.get(ws_config.name) != why:
            log.error("not serving workspace %s: %s", ws_config.name, why)
        self.refused[ws_config.name] = why
        self._refused_configs[ws_config.name] = ws_config

    def prepare(self, new: Config) -> dict[str, Workspace]:
        """Open the workspaces a reload adds or moves, before anything changes. Raises if one cannot be opened
        (closing what it opened): a workspace the new config asks for anew and another daemon holds rejects the
        reload; one that was already refused for that reason, at the same path, stays refused."""
        opened: dict[str, Workspace] = {}
        try:
            for name, wanted in new.workspaces.items():
                current = self.workspaces.get(name)
                if current is not None and not self._replaced(current, wanted):
                    continue
                try:
                    opened[name] = self._factory(wanted)
                except StartupError as exc:
                    before = self._refused_configs.get(name)
                    if current is None and before is not None and before.path == wanted.path and held_elsewhere(exc):
                        continue
                    raise
        except BaseException:
            self.discard(opened)
            raise
        return opened

    def discard(self, opened: dict[str, Workspace]) -> None:
        """Let go of workspaces `prepare` opened for a reload that is not applied (they took no writes)."""
        for ws in opened.values():
            self._release(ws)

    @staticmethod
    def _replaced(current: Workspace, wanted: WorkspaceConfig) -> bool:
        return wanted.path != current.root or wanted.budget.encoding != current.config.budget.encoding

    async def apply(self, new: Config, opened: dict[str, Workspace]) -> None:
        """Swap in a reloaded config with the workspaces `prepare` opened (cannot fail half-way)."""
        self.config = new
        for debouncer in (self._debounce, self._discovery_debounce):
            debouncer.settle, debouncer.max_wait = new.watch.settle_seconds, new.watch.max_wait_seconds
        claimed = {directory_identity(ws.root) for ws in opened.values()}
        for name in list(self.workspaces):
            wanted = new.workspaces.get(name)
            if name in opened or (wanted is None and name not in self.discovered):
                await self.remove(name)
            elif wanted is None and self._identity.get(self.workspaces[name]) in claimed:
                log.info("workspace %s: its directory is configured under another name now", name)
                await self.remove(name)  # discovered, now configured under another name: that name serves it
            elif wanted is not None:
                self.discovered.discard(name)  # configured now: the config's settings win
                self.workspaces[name].reconfigure(wanted, new.limits, new.server.max_pending_writes)
        for ws in opened.values():
            self._register(ws)
        self.refused = {n: why for n, why in self.refused.items() if n in new.workspaces and n not in opened}
        self._refused_configs = {n: new.workspaces[n] for n in self.refused}
        for name in list(self.discovered):
            ws = self.workspaces[name]
            ws.reconfigure(new.workspace_for_discovered(name, ws.root), new.limits, new.server.max_pending_writes)
        self.discover()

    # --- discovery -------------------------------------------------------------------------------------------

    def discover(self) -> None:
        """Register workspace directories under the discovery roots; drop discovered ones that vanished."""
        found: dict[str, Path] = {}
        conflicts: dict[str, str] = {}
        served = {identity: ws.name for ws, identity in self._identity.items()}
        for name, ws_config in self.config.workspaces.items():
            if name not in self.workspaces:  # refused: the configured name still owns its directory
                served.setdefault(directory_identity(ws_config.path), name)
        for root in self.config.discovery.roots:
            try:
                entries = sorted(os.scandir(root), key=lambda e: e.name)
            except (FileNotFoundError, NotADirectoryError, PermissionError):
                continue
            for entry in entries:
                if not entry.is_dir(follow_symlinks=False) or not WORKSPACE_NAME.match(entry.name):
                    continue
                path = Path(entry.path)
                try:  # another user's 0700 directory under a root is skipped, never fatal
                    if not any((path / t).is_dir() for t in TIERS):
                        continue
                except OSError:
                    continue
                name = entry.name
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                owner = served.get((st.st_dev, st.st_ino))
                if owner is not None and owner != name and owner not in self.discovered:
                    conflicts[name] = (
                        f"{path} is the directory of configured workspace {owner!r}; served once, as {owner!r}"
                    )
                elif owner is not None and owner != name:
                    conflicts[name] = f"{path} is the directory of workspace {owner!r}; served once, as {owner!r}"
                elif name in self.config.workspaces and self.config.workspaces[name].path != path:
                    conflicts[name] = f"{path} is named like configured workspace {name!r}; rename one of them"
                elif name in found and found[name] != path:
                    conflicts[name] = f"{path} and {found[name]} are both named {name!r}; the first is used"
                elif name not in self.config.workspaces:
                    found[name] = path
        for name, message in conflicts.items():
            if self.stats.discovery_conflicts.get(name) != message:
                log.warning("discovery: %s", message)
        self.stats.discovery_conflicts = conflicts
        for name in list(self.discovered):
            if found.get(name) != self.workspaces[name].root:
                log.info("discovery: workspace %s is gone", name)
                asyncio.get_running_loop().create_task(self.remove(name))
                self.discovered.discard(name)
        for name, path in found.items():
            if name not in self.workspaces:
                try:
                    self.add(self.config.workspace_for_discovered(name, path))
                except Exception as exc:
                    message = exc.message if isinstance(exc, MemdError) else str(exc)
                    if self.stats.discovery_conflicts.get(name) != message:
                        log.error("discovery: cannot open workspace %s at %s: %s", name, path, message)
                    conflicts[name] = message
                    continue
                self.discovered.add(name)
                log.info("discovery: registered workspace %s at %s", name, path)

    # --- outside changes -------------------------------------------------------------------------------------

    def _hint_from_thread(self, root: Path, tier: str, structural: bool) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._hint, root, tier, structural)

    def _hint(self, root: Path, tier: str, structural: bool = False) -> None:
        self.stats.hints += 1
        if structural:
            self._rewatch.add(root)  # the kernel dropped the watch with the old directory
        name = self._by_root.get(root)
        if name is not None and tier:
            self._debounce.poke(name, tier)
        if root.parent in self.config.discovery.roots and (name is None or not tier):
            self._discovery_debounce.poke(root.parent)  # a workspace directory appeared or went away

    def _adopt(self, name: str, _reasons: set[str]) -> None:
        ws = self.workspaces.get(name)
        if ws is None:
            return
        if self.watcher is not None and ws.root in self._rewatch:
            self._rewatch.discard(ws.root)
            self.watcher.watch_workspace(ws.root)
        task = asyncio.get_running_loop().create_task(self.adopt_outside_changes(name, ws))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def adopt_outside_changes(self, name: str, ws: Workspace) -> set[str]:
        """Read outside changes in (off the loop), count them and tell the change sink: every path that adopts
        (a watcher hint, a job) comes here, so snapshots, checkpoints and search hear of each. Returns the tiers."""
        try:
            changed = await ws.adopt()
        except Exception:  # a failing adoption must not kill the hint path; status shows file errors
            log.exception("workspace %s: adopting an outside change failed", name)
            return set()
        if self.workspaces.get(name) is not ws:  # removed (or replaced by a reload) while it was read in
            return set()
        self._log_file_errors(ws)
        if changed:
            self.stats.adopted += 1
            log.info("workspace %s: adopted outside change to %s", name, ", ".join(sorted(changed)))
            self.sink.changed(ws, frozenset(changed), "external")
        return changed

    async def reconcile(self) -> int:
        """Stat every workspace and adopt what changed (catches dropped events); try refused workspaces again.
        Only a workspace whose files changed is read, off the loop. Returns workspaces changed."""
        changed_count = 0
        self._retry_refused()
        for name in list(self.workspaces):
            ws = self.workspaces.get(name)
            if ws is None:  # removed while an earlier workspace was read in
                continue
            try:  # one broken workspace (warm/ made a file, no permission) must not stop the others
                if self.watcher is not None and self.watcher.rewatch_if_replaced(ws.root):
                    log.info("reconcile: workspace %s: a tier directory was replaced; watching it again", name)
                changed = await ws.adopt() if ws.looks_changed() else set()
            except (OSError, MemdError) as exc:
                log.warning("reconcile: workspace %s could not be checked: %s", name, exc)
                continue
            if self.workspaces.get(name) is not ws:
                continue
            self._log_file_errors(ws)
            if changed:
                changed_count += 1
                self.stats.adopted += 1
                log.info("reconcile: workspace %s changed outside memd (%s)", name, ", ".join(sorted(changed)))
                self.sink.changed(ws, frozenset(changed), "external")
        self.discover()
        self.stats.reconciles += 1
        return changed_count

    def _log_file_errors(self, ws: Workspace) -> None:
        """Say in the log, once per new problem, why writes to a tier are refused, and when they are accepted
        again. Compared with what was logged, not with the last adoption: a read may have taken the file in first."""
        for tier, store in (("hot", ws.hot), ("cold", ws.cold)):
            why = store.error.message if store.error is not None else ""
            if self._file_errors.get((ws.name, tier), "") == why:
                continue
            if why:
                log.error(
                    "workspace %s: writes to the %s tier are refused until the file is fixed: %s", ws.name, tier, why
                )
            else:
                log.info("workspace %s: the %s file is valid again; writes to it are accepted", ws.name, tier)
            self._file_errors[(ws.name, tier)] = why

    def _retry_refused(self) -> None:
        for name, ws_config in list(self._refused_configs.items()):
            try:
                self.add(ws_config)
            except StartupError as exc:
                self._refuse(ws_config, exc.message)
                continue
            del self.refused[name], self._refused_configs[name]
            log.info("workspace %s: no other memd holds it any more; serving it", name)

    def status(self) -> dict[str, Any]:
        return {
            "watcher": self.watcher.status() if self.watcher is not None else {"alive": False, "disabled": True},
            "hints": self.stats.hints,
            "adopted_changes": self.stats.adopted,
            "reconciles": self.stats.reconciles,
            "discovered": sorted(self.discovered),
            "discovery_conflicts": dict(self.stats.discovery_conflicts),
            "refused": dict(self.refused),
        }
