"""ExclusiveLock: one holder at a time, callbacks and coroutines served in arrival order."""

from __future__ import annotations

import asyncio

import pytest

from memd.exclusive import ExclusiveLock


def test_a_free_lock_runs_the_callback_at_once_and_stays_held_until_released() -> None:
    async def go() -> list[str]:
        lock = ExclusiveLock()
        seen: list[str] = []
        lock.acquire_then(lambda: seen.append("ran"))
        seen.append(f"held={lock.locked()}")
        lock.release()
        seen.append(f"held={lock.locked()}")
        return seen

    assert asyncio.run(go()) == ["ran", "held=True", "held=False"]


def test_waiters_get_the_lock_in_arrival_order_whether_callbacks_or_coroutines() -> None:
    async def go() -> list[str]:
        lock = ExclusiveLock()
        order: list[str] = []
        await lock.acquire()

        async def coroutine(name: str) -> None:
            async with lock:
                order.append(name)
                await asyncio.sleep(0)

        def callback(name: str) -> None:
            order.append(name)
            lock.release()

        first = asyncio.create_task(coroutine("task 1"))
        await asyncio.sleep(0)  # task 1 is queued now
        lock.acquire_then(lambda: callback("callback 2"))
        third = asyncio.create_task(coroutine("task 3"))
        await asyncio.sleep(0)
        lock.release()
        await asyncio.gather(first, third)
        for _ in range(3):
            await asyncio.sleep(0)
        assert not lock.locked()
        return order

    assert asyncio.run(go()) == ["task 1", "callback 2", "task 3"]


def test_a_newcomer_does_not_jump_the_queue_while_the_lock_is_being_handed_over() -> None:
    async def go() -> list[str]:
        lock = ExclusiveLock()
        order: list[str] = []
        await lock.acquire()
        lock.acquire_then(lambda: order.append("queued"))
        lock.release()  # handed to the queued callback, which runs on the next loop turn
        lock.acquire_then(lambda: order.append("newcomer"))
        await asyncio.sleep(0)
        order.append(f"held={lock.locked()}")
        return order

    assert asyncio.run(go()) == ["queued", "held=True"]


def test_a_cancelled_waiter_passes_the_lock_on_instead_of_keeping_it() -> None:
    async def go() -> bool:
        lock = ExclusiveLock()
        await lock.acquire()
        waiting = asyncio.create_task(lock.acquire())
        await asyncio.sleep(0)
        after = asyncio.create_task(lock.acquire())
        await asyncio.sleep(0)
        lock.release()  # hands the lock to `waiting`...
        waiting.cancel()  # ...which is cancelled before it runs: `after` must get it
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await asyncio.wait_for(after, 5)
        return lock.locked()

    assert asyncio.run(go()) is True


def test_releasing_a_free_lock_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="not held"):
        ExclusiveLock().release()
