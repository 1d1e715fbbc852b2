"""A FIFO lock for the event loop that plain callbacks can take as well as coroutines.

The workspace writer forms, writes and completes a batch in loop callbacks, not in a Task (LIMITS.md: every
Task and loop hop is paid by each request of a single client), yet sweeps, restores and snapshots must still be
able to wait for "no batch half-way through" with `async with`. asyncio.Lock only serves coroutines, so this lock
lets a callback queue behind coroutines (`acquire_then`) and hands the lock straight to the next waiter on
release, in arrival order. Imports nothing from memd.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable


class ExclusiveLock:
    def __init__(self) -> None:
        self._held = False
        self._waiters: deque[asyncio.Future[None] | Callable[[], None]] = deque()

    def locked(self) -> bool:
        return self._held

    def acquire_then(self, callback: Callable[[], None]) -> None:
        """Run `callback` holding the lock: now if it is free, else from the loop once it is handed over. The
        callback (or whatever it starts) must call `release`."""
        if not self._held and not self._waiters:
            self._held = True
            callback()
        else:
            self._waiters.append(callback)

    async def acquire(self) -> None:
        if not self._held and not self._waiters:
            self._held = True
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # handed over just as we were cancelled: pass it on
                self.release()
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        """Hand the lock to the next live waiter (it stays held), or free it."""
        if not self._held:
            raise RuntimeError("ExclusiveLock released while not held")
        while self._waiters:
            waiter = self._waiters.popleft()
            if isinstance(waiter, asyncio.Future):
                if not waiter.done():
                    waiter.set_result(None)
                    return
            else:
                asyncio.get_running_loop().call_soon(waiter)
                return
        self._held = False

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self.release()
