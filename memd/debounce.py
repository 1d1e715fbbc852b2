"""Debouncing on the event loop: act once a key has been quiet for `settle` seconds, or after `max_wait` at most.

A burst of events for one key is handled once; constant churn is still handled every `max_wait` seconds.
Imports nothing from memd.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass
class _Pending:
    first: float
    last: float
    handle: asyncio.TimerHandle | None = None
    reasons: set[str] = field(default_factory=set)


class Debouncer(Generic[K]):
    def __init__(self, settle: float, max_wait: float, fire: Callable[[K, set[str]], None]) -> None:
        self.settle = settle
        self.max_wait = max_wait
        self._fire = fire
        self._pending: dict[K, _Pending] = {}

    def poke(self, key: K, reason: str = "") -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        pending = self._pending.get(key)
        if pending is None:
            pending = self._pending[key] = _Pending(now, now)
            pending.handle = loop.call_later(self.settle, self._check, key)
        pending.last = now
        if reason:
            pending.reasons.add(reason)

    def _check(self, key: K) -> None:
        pending = self._pending.get(key)
        if pending is None:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        quiet_for = now - pending.last
        if quiet_for < self.settle and now - pending.first < self.max_wait:
            delay = min(self.settle - quiet_for, self.max_wait - (now - pending.first))
            pending.handle = loop.call_later(max(delay, 0.001), self._check, key)
            return
        del self._pending[key]
        self._fire(key, pending.reasons)

    def flush(self) -> None:
        """Fire every pending key now (shutdown)."""
        for key in list(self._pending):
            pending = self._pending.pop(key)
            if pending.handle is not None:
                pending.handle.cancel()
            self._fire(key, pending.reasons)

    def drain(self) -> list[K]:
        """Cancel every pending key and return them (the caller handles them itself)."""
        keys = list(self._pending)
        for key in keys:
            self.cancel(key)
        return keys

    def cancel(self, key: K) -> None:
        pending = self._pending.pop(key, None)
        if pending is not None and pending.handle is not None:
            pending.handle.cancel()

    def __len__(self) -> int:
        return len(self._pending)
