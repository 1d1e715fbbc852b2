"""Watching workspaces for outside edits: one inotify instance and one reader thread for the whole daemon.

The reader thread does nothing but map a path to (workspace root, tier) and post it to the daemon's loop; the
loop decides what changed by comparing fingerprints (so memd's own writes, whose fingerprints it recorded, cause
no work). Events are hints, not truth: after a queue overflow every watched tier is reported as changed, and the
daemon also runs a stat-based reconcile scan. The event mask is filtered (LIMITS.md: the default mask overflows
the queue on a 10,000-write burst, the filtered one does not).

watchdog's `Observer` starts a thread per scheduled watch (4,000 at 1,000 workspaces: bench figure 6), so this
module registers directories on watchdog's `InotifyFD` itself and does the recursion into tier subdirectories
(`warm/archive/`) here. When the kernel refuses a watch (inotify watch or instance limit) that path falls back to
one shared polling observer and the watcher reports itself degraded.
Imports nothing from memd.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers.api import BaseObserver, ObservedWatch

# watchdog>=7.1,<8 (pyproject): InotifyFD's callback API (add_callback / remove_callbacks / WatchCallback with
# on_queue_overflow; on_events_lost since 7.1.1) and read_events/handle_event are what this module is built on,
# and they are watchdog's internal interface, not its public one.
from watchdog.observers.inotify_c import CallbackId, InotifyEvent, InotifyFD, Mask, WatchDescriptor
from watchdog.observers.inotify_c import InotifyConstants as IN
from watchdog.observers.polling import PollingObserver

log = logging.getLogger(__name__)

TIERS = ("hot", "warm", "cold")
WATCH_LIMIT_HINT = (
    "the inotify watch limit is exhausted; memd polls these paths instead. Raise it with "
    "`sysctl fs.inotify.max_user_watches=524288` (or fs.inotify.max_user_instances if that is the one exhausted) "
    "and persist it in /etc/sysctl.d/"
)
# No open, access, close_nowrite or attrib: reads would flood the queue and say nothing about content.
MASK = Mask(
    IN.IN_MODIFY
    | IN.IN_CLOSE_WRITE
    | IN.IN_CREATE
    | IN.IN_DELETE
    | IN.IN_MOVED_FROM
    | IN.IN_MOVED_TO
    | IN.IN_DELETE_SELF
    | IN.IN_MOVE_SELF
    | IN.IN_ONLYDIR
)
_NEW_DIR = IN.IN_CREATE | IN.IN_MOVED_TO
_LIMITS = (errno.ENOSPC, errno.EMFILE)


class _Reader(InotifyFD):
    """InotifyFD read and dispatched on one thread, as watchdog 7.1.0 does it. 7.1.1 reads on this thread and
    dispatches on a second one through an unbounded queue: a burst no longer overflows the kernel queue, it grows
    that queue instead, without bound while the callbacks lag. Here the kernel's queue (fs.inotify.max_queued_events)
    stays the only place events wait, so what they cost is bounded, and its overflow is seen and answered by
    re-checking everything (Watcher.on_queue_overflow), which is what memd is built to do."""

    def run(self) -> None:
        while self.should_keep_running() and not self._closed:  # closed: every read returns nothing at once
            for event in self.read_events():
                self.handle_event(event)


# (root, tier or "" for the root itself, structural: a tier directory itself appeared, vanished or moved);
# called on the watcher's reader thread (or the polling thread)
OnChange = Callable[[Path, str, bool], None]


@dataclass
class WatcherHealth:
    events: int = 0
    handler_errors: int = 0
    last_error: str = ""
    degraded: str = ""
    overflows: int = 0
    polled_roots: list[str] = field(default_factory=list)


@dataclass(eq=False)
class _Dir:
    """One directory watched on behalf of a key (a workspace root or a discovery root)."""

    key: Path
    path: Path
    discovery: bool
    id: CallbackId
    wd: WatchDescriptor


@dataclass(eq=False)
class _Key:
    root: Path
    discovery: bool
    dirs: dict[Path, _Dir] = field(default_factory=dict)
    polls: list[ObservedWatch] = field(default_factory=list)


def _skipped(name: str) -> bool:
    return name == ".git" or ".memd-tmp-" in name


def _is_real_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)  # a symlinked tier is refused by the stores anyway
    except OSError:
        return False


def _dir_identities(root: Path) -> tuple[int, ...]:
    identities = []
    for tier in TIERS:
        try:
            identities.append(os.stat(root / tier).st_ino)
        except OSError:
            identities.append(0)
    return tuple(identities)


class _Polled(FileSystemEventHandler):
    """The polling fallback's handler: same routing as inotify events."""

    def __init__(self, watcher: Watcher, key: _Key) -> None:
        self.watcher = watcher
        self.key = key

    def dispatch(self, event: FileSystemEvent) -> None:
        try:
            self.watcher.health.events += 1
            for raw in (event.src_path, getattr(event, "dest_path", "")):
                if raw:
                    self.watcher._route(self.key.root, self.key.discovery, Path(os.fsdecode(raw)), event.is_directory)
        except Exception as exc:  # never let an exception kill the polling thread
            self.watcher._failed(exc)


class Watcher:
    """Implements watchdog's `WatchCallback` protocol (`on_event`, `on_watch_deleted`, `on_queue_overflow`), which
    InotifyFD calls on its reader thread; `watch_*` and `unwatch` are called on the daemon's loop."""

    def __init__(self, on_change: OnChange, polling_interval: float = 5.0) -> None:
        self.on_change = on_change
        self.health = WatcherHealth()
        self._fd: InotifyFD | None = None  # None before start, after stop, or when the kernel refused an instance
        self._running = False
        self._poller: BaseObserver | None = None
        self._polling_interval = polling_interval
        self._keys: dict[Path, _Key] = {}
        self._by_wd: dict[WatchDescriptor, dict[CallbackId, _Dir]] = {}
        self._tier_dirs: dict[Path, tuple[int, ...]] = {}
        self._ids = itertools.count(1)
        self._last_event: InotifyEvent | None = None
        # Lock order: this lock, then InotifyFD's. InotifyFD calls us without holding its own lock.
        self._lock = threading.RLock()

    def start(self) -> None:
        self._running = True
        try:
            fd = _Reader()
        except OSError as exc:
            if exc.errno not in _LIMITS:
                raise
            log.warning("cannot create an inotify instance (%s): every path is polled", exc)
            return
        fd.name = "memd-watcher"
        fd.start()
        self._fd = fd

    def stop(self) -> None:
        with self._lock:  # after this no thread starts a poller (see _poll)
            self._running = False
            poller, self._poller = self._poller, None
        fd, self._fd = self._fd, None
        if fd is not None:
            fd.stop()  # closes the inotify fd (and with it every watch) and wakes the reader
            fd.join(timeout=5)
        if poller is not None:
            poller.stop()
            if poller.is_alive():
                poller.join(timeout=5)
        with self._lock:
            self._keys.clear()
            self._by_wd.clear()

    @property
    def alive(self) -> bool:
        if self._fd is not None:
            return self._fd.is_alive()
        return self._running and self._poller is not None and self._poller.is_alive()

    def watch_workspace(self, root: Path) -> None:
        """Watch a workspace's tier directories (and every directory below them) and its root."""
        key = self._replace(root, discovery=False)
        self._add(key, root, recursive=False)
        for tier in TIERS:
            if _is_real_dir(root / tier):
                self._add_tree(key, root / tier)
        self._tier_dirs[root] = _dir_identities(root)

    def rewatch_if_replaced(self, root: Path) -> bool:
        """A tier directory removed and made again loses its kernel watch: watch it anew. True if it did."""
        if root not in self._tier_dirs or _dir_identities(root) == self._tier_dirs[root]:
            return False
        self.watch_workspace(root)
        return True

    def watch_discovery_root(self, root: Path) -> None:
        """Watch a discovery root for workspace directories appearing and disappearing."""
        self._add(self._replace(root, discovery=True), root, recursive=False)

    def unwatch(self, root: Path) -> None:
        self._tier_dirs.pop(root, None)
        with self._lock:
            key = self._keys.pop(root, None)
            if key is None:
                return
            self._drop(list(key.dirs.values()))
            polls, key.polls = key.polls, []
        self._unpoll(polls)

    # --- InotifyFD's WatchCallback protocol (reader thread) -------------------------------------------------

    def on_event(self, event: InotifyEvent) -> None:
        if event is self._last_event:
            return  # InotifyFD calls once per registration on a watch; the first call handled all of them
        self._last_event = event
        try:
            with self._lock:
                dirs = list(self._by_wd.get(event.wd, {}).values())
            if dirs:
                self.health.events += 1
            for d in dirs:
                path = d.path / os.fsdecode(event.name) if event.name else d.path
                if not d.discovery and event.name and event.mask & IN.IN_ISDIR:
                    self._follow_dir(d.key, path, event.mask)
                self._route(d.key, d.discovery, path, event.is_directory)
        except Exception as exc:  # never let an exception kill the reader thread
            self._failed(exc)

    def on_watch_deleted(self, wd: WatchDescriptor) -> None:
        """The kernel dropped a watch (its directory is gone): forget it. A new directory is watched on its creation."""
        with self._lock:
            for d in self._by_wd.pop(wd, {}).values():
                key = self._keys.get(d.key)
                if key is not None and key.dirs.get(d.path) is d:
                    del key.dirs[d.path]

    def on_queue_overflow(self) -> None:
        """Events were lost, and nobody knows which: report everything watched as changed."""
        try:
            self.health.overflows += 1
            log.warning("inotify queue overflow: re-checking every watched workspace")
            with self._lock:
                keys = list(self._keys.values())
            for key in keys:
                if not key.discovery:
                    for tier in TIERS:
                        self.on_change(key.root, tier, False)
                    continue
                with contextlib.suppress(OSError), os.scandir(key.root) as entries:
                    for entry in entries:
                        self.on_change(key.root / entry.name, "", False)
        except Exception as exc:
            self._failed(exc)

    def on_events_lost(self) -> None:
        """watchdog 7.1.1 and later: called once every callback's `on_queue_overflow` has returned (7.1.0 never
        calls it). Everything watched was reported as changed there already; without this method 7.1.1's reader
        thread died at the first overflow, and outside edits went unseen until the reconcile scan."""

    # --- internals -------------------------------------------------------------------------------------------

    def _route(self, root: Path, discovery: bool, path: Path, is_directory: bool) -> None:
        try:
            parts = path.relative_to(root).parts
        except ValueError:
            return
        if discovery:
            if parts:
                self.on_change(root / parts[0], "" if len(parts) == 1 else parts[1], False)
            return
        if not parts or parts[0] not in TIERS or any(_skipped(p) for p in parts):
            return
        self.on_change(root, parts[0], is_directory and len(parts) == 1)

    def _follow_dir(self, root: Path, path: Path, mask: int) -> None:
        """Keep the recursion true: watch a directory that appears under a tier, forget one that moves away."""
        with self._lock:
            key = self._keys.get(root)
        if key is None:
            return
        parts = path.relative_to(root).parts
        if not parts or parts[0] not in TIERS or any(_skipped(p) for p in parts):
            return
        if mask & _NEW_DIR:
            self._add_tree(key, path)
        elif mask & IN.IN_MOVED_FROM:
            with self._lock:
                self._drop([d for p, d in key.dirs.items() if p.is_relative_to(path)])

    def _replace(self, root: Path, discovery: bool) -> _Key:
        self.unwatch(root)
        key = _Key(root, discovery)
        with self._lock:
            self._keys[root] = key
        return key

    def _add_tree(self, key: _Key, top: Path) -> None:
        """Watch `top` and every directory below it, except `.git`, memd's temporary files and symlinks."""
        stack = [top]
        while stack:
            path = stack.pop()
            if not self._add(key, path, recursive=True):
                continue  # polled (recursively), already watched, or gone
            with contextlib.suppress(OSError), os.scandir(path) as entries:
                stack.extend(Path(e.path) for e in entries if e.is_dir(follow_symlinks=False) and not _skipped(e.name))

    def _add(self, key: _Key, path: Path, recursive: bool) -> bool:
        """Watch one directory for `key`. False if it is polled instead, already watched, or could not be."""
        fd = self._fd
        if not self._running:
            return False
        if fd is None:
            self._poll(key, path, recursive)
            return False
        id_ = CallbackId(next(self._ids))
        # Below the root, never follow a symlink planted where a directory was.
        mask = MASK if path == key.root else Mask(MASK | IN.IN_DONT_FOLLOW)
        with self._lock:
            if self._keys.get(key.root) is not key or path in key.dirs:
                return False  # unwatched meanwhile, or a creation event and the scan both found it
            try:
                wd = fd.add_callback(os.fsencode(path), mask, self, id_)
            except OSError as exc:
                error = exc
            else:
                if wd < 0:  # watchdog ignores EACCES and hands back -1
                    fd.remove_callbacks([(wd, id_)])
                    return False
                d = key.dirs[path] = _Dir(key.root, path, key.discovery, id_, wd)
                self._by_wd.setdefault(d.wd, {})[d.id] = d
                return True
        if error.errno in _LIMITS:
            self._poll(key, path, recursive)
        elif error.errno not in (errno.ENOENT, errno.ENOTDIR):  # gone already: its removal is an event
            self.health.last_error = f"cannot watch {path}: {error}"
            log.warning("cannot watch %s: %s", path, error)
        return False

    def _drop(self, dirs: list[_Dir]) -> None:
        """Remove watches (the lock is held)."""
        callbacks = []
        for d in dirs:
            key = self._keys.get(d.key)
            if key is not None and key.dirs.get(d.path) is d:
                del key.dirs[d.path]
            registered = self._by_wd.get(d.wd, {})
            if registered.pop(d.id, None) is not None:
                callbacks.append((d.wd, d.id))
            if not registered:
                self._by_wd.pop(d.wd, None)
        if callbacks and self._fd is not None:
            with contextlib.suppress(OSError):
                self._fd.remove_callbacks(callbacks)

    def _poll(self, key: _Key, path: Path, recursive: bool) -> None:
        with self._lock:  # called from the loop and from the reader thread (a directory made under a tier)
            if not self._running:
                return
            if self._poller is None:
                self._poller = PollingObserver(timeout=self._polling_interval)
                self._poller.daemon = True
                self._poller.start()
            poller = self._poller
        watch = poller.schedule(_Polled(self, key), str(path), recursive=recursive)
        with self._lock:
            current = self._keys.get(key.root) is key
            if current:
                key.polls.append(watch)
        if not current:
            self._unpoll([watch])
            return
        self.health.degraded = WATCH_LIMIT_HINT
        if str(path) not in self.health.polled_roots:
            self.health.polled_roots.append(str(path))
        log.warning("%s: %s", path, WATCH_LIMIT_HINT)

    def _unpoll(self, watches: list[ObservedWatch]) -> None:
        for watch in watches:
            if self._poller is not None:
                with contextlib.suppress(KeyError, OSError):
                    self._poller.unschedule(watch)

    def _failed(self, exc: Exception) -> None:
        self.health.handler_errors += 1
        self.health.last_error = f"{type(exc).__name__}: {exc}"
        log.exception("watch handler failed")

    def status(self) -> dict[str, Any]:
        return {
            "alive": self.alive,
            "events": self.health.events,
            "handler_errors": self.health.handler_errors,
            "last_error": self.health.last_error or None,
            "degraded": self.health.degraded or None,
            "overflows": self.health.overflows,
            "polled_paths": list(self.health.polled_roots),
            "watched": len(self._keys),
        }
