"""The server runs "taskless" methods without a Task and still answers every request, in request order.

A real Unix socket and a real asyncio server; the dispatcher is a stand-in so each way a handler can end
(return at once, await a future, fail, yield bare) is exercised on purpose.
"""

from __future__ import annotations

import asyncio
import errno
import json
import socket
import struct
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memd import protocol
from memd.errors import ACCESS_DENIED, INTERNAL_ERROR, INVALID_PARAMS, InvalidParams
from memd.handlers import Peer
from memd.server import MAX_LINES_PER_TURN, Limits, Server

TASKLESS = frozenset({"now", "later", "fails", "bug", "yields", "current_task"})
LIMITS = Limits(max_request_bytes=65536, max_connections=16, idle_timeout=60.0, request_timeout=10.0)


class Stand:
    """The dispatcher: one behaviour per method; `later` waits for `release`."""

    def __init__(self) -> None:
        self.release: asyncio.Future[str] | None = None
        self.turn = 0  # advanced once per loop turn by `tick`
        self.turns: list[int] = []  # the turn each request was dispatched in

    def tick(self) -> None:
        self.turn += 1
        asyncio.get_running_loop().call_soon(self.tick)

    async def dispatch(self, peer: Peer, request: protocol.Request) -> Any:
        self.turns.append(self.turn)
        method = request.method
        if method == "now":
            return {"n": request.params.get("n")}
        if method == "later":
            assert self.release is not None
            return {"released": await self.release, "n": request.params.get("n")}
        if method == "fails":
            raise InvalidParams("parameter 'x' is wrong", data={"param": "x"})
        if method == "bug":
            raise ValueError("a bug")
        if method == "yields":
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            return "after two bare yields"
        if method == "current_task":
            return asyncio.current_task() is not None
        if method == "task_method":  # not taskless: runs in a Task
            await asyncio.sleep(0.01)
            return asyncio.current_task() is not None
        raise AssertionError(method)


def exchange(
    lines: list[dict[str, Any]], stand: Stand, release_after: float | None = None, owed: int | None = None
) -> list[dict[str, Any]]:
    """Send `lines` in one write and read `owed` answers (by default one per line)."""

    async def go() -> list[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        stand.release = loop.create_future()
        loop.call_soon(stand.tick)
        with tempfile.TemporaryDirectory() as tmp:
            path = str(Path(tmp) / "s.sock")
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(path)
            server = Server(stand.dispatch, lambda peer: True, LIMITS, TASKLESS)
            await server.start(listener)
            reader, writer = await asyncio.open_unix_connection(path)
            writer.write(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
            await writer.drain()
            if release_after is not None:
                loop.call_later(release_after, stand.release.set_result, "yes")
            count = len(lines) if owed is None else owed
            answers = [json.loads(await asyncio.wait_for(reader.readline(), 10)) for _ in range(count)]
            writer.close()
            server.stop_accepting()
            await server.drain(1.0)
            return answers

    return asyncio.run(go())


def call(method: str, request_id: int, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def test_pipelined_taskless_requests_are_answered_in_request_order_even_when_later_ones_finish_first() -> None:
    lines = [call("later", 1, n=1), call("now", 2, n=2), call("task_method", 3), call("later", 4, n=4)]

    answers = exchange(lines, Stand(), release_after=0.05)

    assert [a["id"] for a in answers] == [1, 2, 3, 4]
    assert answers[0]["result"] == {"released": "yes", "n": 1}
    assert answers[1]["result"] == {"n": 2}
    assert answers[2]["result"] is True  # a method outside the taskless set still gets its Task
    assert answers[3]["result"] == {"released": "yes", "n": 4}


def test_a_taskless_handler_that_fails_gets_its_error_and_the_connection_goes_on() -> None:
    answers = exchange([call("fails", 1), call("bug", 2), call("now", 3, n=3)], Stand())

    assert answers[0]["error"]["code"] == INVALID_PARAMS
    assert answers[0]["error"]["data"] == {"param": "x"}
    assert answers[1]["error"]["code"] == INTERNAL_ERROR
    assert "ValueError: a bug" in answers[1]["error"]["message"]
    assert answers[2]["result"] == {"n": 3}


def test_one_connection_dispatches_at_most_a_turns_worth_of_lines_before_others_get_the_loop() -> None:
    stand = Stand()
    answers = exchange([call("now", i, n=i) for i in range(300)], stand)  # one write: one chunk for memd

    assert [a["result"]["n"] for a in answers] == list(range(300))
    per_turn = Counter(stand.turns)
    assert max(per_turn.values()) <= MAX_LINES_PER_TURN
    assert len(per_turn) >= 300 // MAX_LINES_PER_TURN


def test_a_taskless_handler_may_yield_bare_and_is_resumed() -> None:
    answers = exchange([call("yields", 1)], Stand())

    assert answers[0]["result"] == "after two bare yields"


def test_a_taskless_handler_really_runs_without_a_task() -> None:
    answers = exchange([call("current_task", 1)], Stand())

    assert answers[0]["result"] is False


def test_the_daemons_taskless_methods_are_all_real_methods() -> None:
    from memd import handlers

    assert handlers.TASKLESS.issubset(handlers.METHODS)
    assert "checkpoint.run" not in handlers.TASKLESS  # awaits the summarizer under a deadline: needs a Task


def notify(method: str, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


def test_a_notification_is_never_answered_however_its_handler_ends() -> None:
    stand = Stand()
    notifications = [notify(m) for m in ("now", "fails", "bug", "yields", "task_method", "later")]

    answers = exchange([*notifications, call("now", 9, n=9), call("later", 10)], stand, release_after=0.05, owed=2)

    # Responses keep request order: an answer to any notification would come before the answer to id 9.
    assert [a["id"] for a in answers] == [9, 10], answers
    assert answers[0]["result"] == {"n": 9}


# --- peer credentials: a peer memd cannot identify is refused, whatever the policy ---------------------------------


def refusal(authorize: Callable[[Peer], bool]) -> tuple[list[dict[str, Any]], bool, dict[str, int]]:
    """Connect and send one request; what memd sent, whether it closed the connection, and its counters."""

    async def go() -> tuple[list[dict[str, Any]], bool, dict[str, int]]:
        with tempfile.TemporaryDirectory() as tmp:
            path = str(Path(tmp) / "s.sock")
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(path)
            server = Server(Stand().dispatch, authorize, LIMITS, TASKLESS)
            await server.start(listener)
            reader, writer = await asyncio.open_unix_connection(path)
            writer.write(json.dumps(call("now", 1, n=1)).encode() + b"\n")
            await writer.drain()
            lines: list[dict[str, Any]] = []
            closed = False
            try:
                while line := await asyncio.wait_for(reader.readline(), 5):
                    lines.append(json.loads(line))
                closed = True
            except ConnectionResetError:  # memd closed with our request unread on its side
                closed = True
            except TimeoutError:
                pass  # still open after its answers: it was admitted
            writer.close()
            server.stop_accepting()
            await server.drain(1.0)
            return lines, closed, dict(server.stats)

    return asyncio.run(go())


@pytest.mark.parametrize(
    "failure",
    [OSError(errno.EBADF, "Bad file descriptor"), struct.error("unpack requires a buffer of 12 bytes"), None],
    ids=["getsockopt-fails", "short-answer", "no-socket"],
)
def test_a_peer_whose_credentials_cannot_be_read_is_refused_even_by_a_policy_that_admits_everyone(
    monkeypatch: pytest.MonkeyPatch, failure: Exception | None
) -> None:
    class Unreadable:
        def getsockopt(self, *args: Any) -> bytes:
            if failure is None:
                return b"\0" * 12  # never reached: there is no socket to ask
            raise failure

    import memd.server

    real_peer_of = memd.server.peer_of
    monkeypatch.setattr(memd.server, "peer_of", lambda sock: real_peer_of(Unreadable() if failure else None))
    asked: list[Peer] = []

    lines, closed, stats = refusal(lambda peer: asked.append(peer) is None)

    assert len(lines) == 1 and closed, (lines, closed)
    assert lines[0]["error"]["code"] == ACCESS_DENIED
    assert "could not read the peer's credentials" in lines[0]["error"]["message"]
    assert "result" not in lines[0]
    assert asked == [], "the policy must never be asked about a peer memd could not identify"
    assert stats["unidentified"] == 1
    assert stats["accepted"] == 0
