"""The asyncio client against a real daemon: concurrent calls on one connection, errors, refusals, reconnects."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harness import RunningDaemon, base_config

from memd import errors
from memd.async_client import AsyncClient
from memd.client import DaemonNotRunning


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_two_hundred_concurrent_calls_on_one_connection_each_get_their_own_answer(daemon: RunningDaemon) -> None:
    async def go() -> tuple[list[Any], list[Any]]:
        async with AsyncClient(daemon.socket_path) as memd:
            logged = await asyncio.gather(
                *(memd.call("warm.log", workspace="alpha", action=f"concurrent {i}") for i in range(100))
            )
            mixed = await asyncio.gather(
                *(
                    memd.call("ping") if i % 2 else memd.call("hot.note", workspace="beta", text=f"note {i}")
                    for i in range(100)
                )
            )
            return logged, mixed

    logged, mixed = run(go())

    assert [r["entry"]["action"] for r in logged] == [f"concurrent {i}" for i in range(100)]
    assert all(r["pong"] for r in mixed[1::2])
    assert [r["note"]["text"] for r in mixed[0::2]] == [f"note {i}" for i in range(0, 100, 2)]
    recent = daemon.call("warm.recent", workspace="alpha")
    assert len(recent["days"][0]["entries"]) == 100


def test_an_error_answer_raises_the_matching_memd_error_and_the_connection_goes_on(daemon: RunningDaemon) -> None:
    async def go() -> tuple[BaseException, BaseException, Any]:
        async with AsyncClient(daemon.socket_path) as memd:
            unknown = await asyncio.gather(memd.call("warm.log", workspace="nope", action="x"), return_exceptions=True)
            invalid = await asyncio.gather(memd.call("warm.log", workspace="alpha"), return_exceptions=True)
            return unknown[0], invalid[0], await memd.call("ping")

    unknown, invalid, pong = run(go())

    assert isinstance(unknown, errors.UnknownWorkspace)
    assert isinstance(invalid, errors.InvalidParams)
    assert invalid.data == {"param": "action"}
    assert pong["pong"] is True


def test_no_daemon_is_daemon_not_running_naming_the_socket(tmp_path: Path) -> None:
    async def go() -> None:
        async with AsyncClient(tmp_path / "absent.sock") as memd:
            await memd.call("ping")

    with pytest.raises(DaemonNotRunning, match=r"absent\.sock"):
        run(go())


def test_a_connection_over_the_cap_is_refused_with_busy(
    make_daemon: Callable[..., RunningDaemon], short_root: Path
) -> None:
    capped = make_daemon("cap", config=base_config(short_root / "cap", server={"max_connections": 1}))

    async def go() -> BaseException:
        async with AsyncClient(capped.socket_path) as first, AsyncClient(capped.socket_path) as second:
            await first.call("ping")  # holds the only connection
            result = await asyncio.gather(second.call("ping"), return_exceptions=True)
            return result[0]

    refused = run(go())

    assert isinstance(refused, errors.Busy)


def test_calls_in_flight_fail_with_unavailable_when_memd_stops_and_the_next_call_reconnects(
    make_daemon: Callable[..., RunningDaemon],
) -> None:
    d = make_daemon("restart")

    async def go() -> tuple[Any, Any]:
        async with AsyncClient(d.socket_path, timeout=20) as memd:
            await memd.call("ping")
            await asyncio.to_thread(d.stop)
            after_stop = await asyncio.gather(memd.call("ping"), return_exceptions=True)
            await asyncio.to_thread(d.start)
            return after_stop[0], await memd.call("ping")

    after_stop, pong = run(go())

    assert isinstance(after_stop, errors.Unavailable | DaemonNotRunning)
    assert pong["pong"] is True


def test_both_clients_say_the_same_when_no_daemon_listens(tmp_path: Path) -> None:
    from memd.client import Client

    with pytest.raises(DaemonNotRunning, match=r"memd is not running: nothing listens on .*absent\.sock"):
        Client(tmp_path / "absent.sock").call("ping")
    (tmp_path / "refusing.sock").touch(mode=0o000)  # not a socket: connect() fails with ECONNREFUSED

    with pytest.raises(DaemonNotRunning, match=r"refusing\.sock"):
        run(AsyncClient(tmp_path / "refusing.sock").call("ping"))
