"""Specification of memd.debounce.Debouncer: one action per burst, at least one per max_wait under churn.

Every test runs on a real event loop with small settle values and bounded loops; it asserts how often the
action ran, never how long anything took.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from memd.debounce import Debouncer

Fired = list[tuple[str, set[str]]]


def recorder() -> tuple[Fired, Callable[[str, set[str]], None]]:
    fired: Fired = []
    return fired, lambda key, reasons: fired.append((key, set(reasons)))


async def until(condition: Callable[[], bool], steps: int = 500, step: float = 0.01) -> bool:
    """Yield to the loop until `condition` holds (at most `steps` times)."""
    for _ in range(steps):
        if condition():
            return True
        await asyncio.sleep(step)
    return condition()


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(main())


def test_a_burst_for_one_key_fires_once_with_every_reason() -> None:
    fired, fire = recorder()

    async def main() -> None:
        debouncer: Debouncer[str] = Debouncer(0.02, 5.0, fire)
        for i in range(100):
            debouncer.poke("alpha", "hot" if i % 2 else "cold")
        debouncer.poke("alpha")  # no reason: adds none
        assert len(debouncer) == 1
        assert await until(lambda: len(fired) >= 1)
        for _ in range(10):  # a while longer: nothing more comes
            await asyncio.sleep(0.02)
        assert len(debouncer) == 0

    run(main)
    assert fired == [("alpha", {"hot", "cold"})]


def test_keys_are_debounced_independently() -> None:
    fired, fire = recorder()

    async def main() -> None:
        debouncer: Debouncer[str] = Debouncer(0.02, 5.0, fire)
        for _ in range(20):
            debouncer.poke("alpha", "warm")
            debouncer.poke("beta", "hot")
        assert await until(lambda: len(fired) >= 2)
        await asyncio.sleep(0.1)

    run(main)
    assert sorted(fired) == [("alpha", {"warm"}), ("beta", {"hot"})]


def test_a_key_poked_again_after_firing_fires_again() -> None:
    fired, fire = recorder()

    async def main() -> None:
        debouncer: Debouncer[str] = Debouncer(0.02, 5.0, fire)
        debouncer.poke("alpha", "first")
        assert await until(lambda: len(fired) == 1)
        debouncer.poke("alpha", "second")
        assert await until(lambda: len(fired) == 2)

    run(main)
    assert fired == [("alpha", {"first"}), ("alpha", {"second"})]


def test_constant_churn_still_fires_within_max_wait() -> None:
    """Pokes every few ms never leave `settle` of quiet, so only max_wait can make it fire, again and again."""
    fired, fire = recorder()

    async def main() -> None:
        debouncer: Debouncer[str] = Debouncer(0.05, 0.15, fire)
        for _ in range(2000):  # bounded; ends as soon as max_wait has fired three times
            debouncer.poke("alpha", "warm")
            await asyncio.sleep(0.005)
            if len(fired) >= 3:
                break
        debouncer.cancel("alpha")

    run(main)
    assert len(fired) >= 3  # fired while the churn went on, not only once it stopped
    assert all(f == ("alpha", {"warm"}) for f in fired)


def test_flush_fires_every_pending_key_now_and_nothing_later() -> None:
    fired, fire = recorder()

    async def main() -> None:
        debouncer: Debouncer[str] = Debouncer(10.0, 60.0, fire)  # would not fire by itself during the test
        debouncer.poke("alpha", "hot")
        debouncer.poke("beta", "cold")
        debouncer.poke("alpha", "warm")
        debouncer.flush()
        assert len(debouncer) == 0
        assert sorted(fired) == [("alpha", {"hot", "warm"}), ("beta", {"cold"})]
        debouncer.flush()  # nothing pending: nothing fires
        await asyncio.sleep(0.05)

    run(main)
    assert len(fired) == 2


def test_cancel_drops_a_pending_key_without_firing() -> None:
    fired, fire = recorder()

    async def main() -> None:
        debouncer: Debouncer[str] = Debouncer(0.02, 0.05, fire)
        debouncer.poke("alpha", "hot")
        debouncer.poke("beta", "hot")
        debouncer.cancel("alpha")
        debouncer.cancel("never-poked")
        assert await until(lambda: len(fired) >= 1)
        for _ in range(10):
            await asyncio.sleep(0.02)

    run(main)
    assert fired == [("beta", {"hot"})]
