"""Watching workspaces for outside edits (watchdog / inotify).

watchdog's thread does nothing but map a path to (workspace root, tier) and post it to the daemon's loop; the
loop decides what changed by comparing fingerprints (so memd's own writes, whose fingerprints it recorded, cause
no work). Events are hints, not truth: watchdog drops the inotify overflow notification, so the daemon also runs
a stat-based reconcile scan. The event mask is filtered (LIMITS.md: the default mask overflows the queue on a
10,000-write burst, the filtered one does not). When the kernel refuses a watch (max_user_watches exhausted)
that root falls back to a polling observer and the watcher reports itself degraded.
Imports nothing from memd.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, ObservedWatch
from watchdog.observers.polling import PollingObserver

log = logging.getLogger(__name__)

EVENT_FILTER: list[type[FileSystemEvent]] = [
    FileModifiedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileMovedEvent,
    FileDeletedEvent,
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
]
TIERS = ("hot", "warm", "cold")
WATCH_LIMIT_HINT = (
    "the inotify watch limit is exhausted; memd polls these paths instead. Raise it with "
    "`sysctl fs.inotify.max_user_watches=524288` (and persist it in /etc/sysctl.d/)"
)

# (root, tier or "" for the root itself, structural: a tier directory itself appeared, vanished or moved);
# called on the watchdog thread
OnChange = Callable[[Path, str, bool], None]


@dataclass
class WatcherHealth:
    events: int = 0
    handler_errors: int = 0
    last_error: str = ""
    degraded: str = ""
    polled_roots: list[str] = field(default_factory=list)


class _Handler(FileSystemEventHandler):
    def __init__(self, root: Path, on_change: OnChange, health: WatcherHealth, discovery: bool) -> None:
        self.root = root
        self.on_change = on_change
        self.health = health
        self.discovery = discovery

    def dispatch(self, event: FileSystemEvent) -> None:
        try:
            self.health.events += 1
            for raw in (event.src_path, getattr(event, "dest_path", "")):
                if raw:
                    self._route(Path(raw if isinstance(raw, str) else raw.decode()), event.is_directory)
        except Exception as exc:  # never let an exception kill the observer thread
            self.health.handler_errors += 1
            self.health.last_error = f"{type(exc).__name__}: {exc}"
            log.exception("watch handler failed")

    def _route(self, path: Path, is_directory: bool) -> None:
        try:
            parts = path.relative_to(self.root).parts
        except ValueError:
            return
        if self.discovery:
            if parts:
                self.on_change(self.root / parts[0], "" if len(parts) == 1 else parts[1], False)
            return
        if not parts or parts[0] not in TIERS:
            return
        if any(p == ".git" or ".memd-tmp-" in p for p in parts):
            return
        self.on_change(self.root, parts[0], is_directory and len(parts) == 1)


def _dir_identities(root: Path) -> tuple[int, ...]:
    identities = []
    for tier in TIERS:
        try:
            identities.append(os.stat(root / tier).st_ino)
        except OSError:
            identities.append(0)
    return tuple(identities)


class Watcher:
    def __init__(self, on_change: OnChange, polling_interval: float = 5.0) -> None:
        self.on_change = on_change
        self.health = WatcherHealth()
        self._observer: BaseObserver = Observer()
        self._poller: BaseObserver | None = None
        self._polling_interval = polling_interval
        self._watches: dict[Path, list[tuple[BaseObserver, ObservedWatch]]] = {}
        self._tier_dirs: dict[Path, tuple[int, ...]] = {}
        self._lock = threading.Lock()

    def start(self) -> None:
        self._observer.daemon = True
        self._observer.start()

    def stop(self) -> None:
        for observer in (self._observer, self._poller):
            if observer is not None:
                observer.stop()
        for observer in (self._observer, self._poller):
            if observer is not None and observer.is_alive():
                observer.join(timeout=5)

    @property
    def alive(self) -> bool:
        return self._observer.is_alive()

    def watch_workspace(self, root: Path) -> None:
        """Watch a workspace's tier directories (recursively, so warm/archive is seen too)."""
        handler = _Handler(root, self.on_change, self.health, discovery=False)
        paths = [root / t for t in TIERS if (root / t).is_dir()]
        self._schedule(root, handler, [(p, True) for p in paths] + [(root, False)])
        self._tier_dirs[root] = _dir_identities(root)

    def rewatch_if_replaced(self, root: Path) -> bool:
        """A tier directory removed and made again loses its kernel watch: watch it anew. True if it did."""
        if root not in self._tier_dirs or _dir_identities(root) == self._tier_dirs[root]:
            return False
        self.watch_workspace(root)
        return True

    def watch_discovery_root(self, root: Path) -> None:
        """Watch a discovery root for workspace directories appearing and disappearing."""
        handler = _Handler(root, self.on_change, self.health, discovery=True)
        self._schedule(root, handler, [(root, False)])

    def unwatch(self, root: Path) -> None:
        self._tier_dirs.pop(root, None)
        with self._lock:
            for observer, watch in self._watches.pop(root, []):
                with contextlib.suppress(KeyError, OSError):
                    observer.unschedule(watch)

    def _schedule(self, key: Path, handler: FileSystemEventHandler, paths: list[tuple[Path, bool]]) -> None:
        self.unwatch(key)
        scheduled: list[tuple[BaseObserver, ObservedWatch]] = []
        for path, recursive in paths:
            try:
                watch = self._observer.schedule(handler, str(path), recursive=recursive, event_filter=EVENT_FILTER)
                scheduled.append((self._observer, watch))
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EMFILE):
                    raise
                scheduled.append((self._polling_observer(), self._poll(handler, path, recursive)))
                self.health.degraded = WATCH_LIMIT_HINT
                self.health.polled_roots.append(str(path))
                log.warning("%s: %s", path, WATCH_LIMIT_HINT)
        with self._lock:
            self._watches[key] = scheduled

    def _polling_observer(self) -> BaseObserver:
        if self._poller is None:
            self._poller = PollingObserver(timeout=self._polling_interval)
            self._poller.daemon = True
            self._poller.start()
        return self._poller

    def _poll(self, handler: FileSystemEventHandler, path: Path, recursive: bool) -> ObservedWatch:
        return self._polling_observer().schedule(handler, str(path), recursive=recursive)

    def status(self) -> dict[str, Any]:
        return {
            "alive": self.alive,
            "events": self.health.events,
            "handler_errors": self.health.handler_errors,
            "last_error": self.health.last_error or None,
            "degraded": self.health.degraded or None,
            "polled_paths": list(self.health.polled_roots),
            "watched": len(self._watches),
        }
