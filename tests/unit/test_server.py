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
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memd import protocol
from memd.early_ack import ReplyTo
from memd.errors import ACCESS_DENIED, INTERNAL_ERROR, INVALID_PARAMS, InvalidParams
from memd.handlers import Peer
from memd.server import MAX_LINES_PER_TURN, Limits, Server

TASKLESS = frozenset({"now", "later", "fails", "bug", "yields", "current_task", "early"})
LIMITS = Limits(max_request_bytes=65536, max_connections=16, idle_timeout=60.0, request_timeout=10.0)


class Stand:
    """The dispatcher: one behaviour per method; `later` waits for `release`."""

    def __init__(self) -> None:
        self.release: asyncio.Future[str] | None = None
        self.turn = 0  # advanced once per loop turn by `tick`
        self.turns: list[int] = []  # the turn each request was dispatched in
        self.early_sent: list[bool] = []  # what send_early said, for each `early` request

    def tick(self) -> None:
        self.turn += 1
        asyncio.get_running_loop().call_soon(self.tick)

    async def dispatch(self, peer: Peer, request: protocol.Request, reply_to: ReplyTo | None = None) -> Any:
        self.turns.append(self.turn)
        method = request.method
        if method == "now":
            size = request.params.get("size")
            return {"n": request.params.get("n")} | ({"pad": "x" * size} if size else {})
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
        if method == "early":  # a write: its worker sends the answer itself, then the loop finishes the request
            assert reply_to is not None
            n, size = request.params.get("n"), request.params.get("size", 0)
            loop = asyncio.get_running_loop()
            finished = loop.create_future()

            def worker() -> None:
                payload = reply_to.outlet.encode_answer(
                    reply_to.request_id, {"from": "worker", "n": n, "pad": "x" * size}
                )
                self.early_sent.append(reply_to.outlet.send_early(reply_to.slot, payload))
                loop.call_soon_threadsafe(finished.set_result, None)

            threading.Thread(target=worker).start()
            await finished
            return {"from": "loop", "n": n}
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
            reader, writer = await asyncio.open_unix_connection(path, limit=2**24)
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


def test_an_answer_its_worker_sent_is_the_one_the_client_gets_and_the_only_one() -> None:
    stand = Stand()

    answers = exchange([call("early", 1, n=1), call("now", 2, n=2), call("early", 3, n=3)], stand)

    assert [a["id"] for a in answers] == [1, 2, 3]  # nothing sent twice: the next answer is the next request's
    assert answers[0]["result"] == {"from": "worker", "n": 1, "pad": ""}
    assert answers[1]["result"] == {"n": 2}
    assert True in stand.early_sent


def test_a_worker_never_answers_ahead_of_an_answer_still_owed_on_its_connection() -> None:
    stand = Stand()

    answers = exchange([call("later", 1, n=1), call("early", 2, n=2)], stand, release_after=0.1)

    assert [a["id"] for a in answers] == [1, 2]
    assert stand.early_sent == [False]
    assert answers[1]["result"] == {"from": "loop", "n": 2}  # the loop answered it, in its turn


def test_an_early_answer_bigger_than_the_socket_buffer_arrives_whole_and_before_the_next() -> None:
    stand = Stand()
    size = 4 * 2**20  # far over a Unix socket's send buffer: the worker's send is partial, the loop sends the rest

    answers = exchange([call("early", 1, n=1, size=size), call("now", 2, n=2)], stand)

    assert stand.early_sent == [True]
    assert answers[0]["result"] == {"from": "worker", "n": 1, "pad": "x" * size}
    assert answers[1] == {"jsonrpc": "2.0", "id": 2, "result": {"n": 2}}


def test_a_worker_never_sends_into_the_middle_of_the_loops_last_answer() -> None:
    stand = Stand()
    size = 4 * 2**20  # the loop's answer fills the socket: most of it waits in the transport

    answers = exchange([call("now", 1, n=1, size=size), call("early", 2, n=2)], stand)

    assert answers[0]["result"] == {"n": 1, "pad": "x" * size}  # whole: nothing was sent into its middle
    assert answers[1]["id"] == 2 and answers[1]["result"]["n"] == 2  # by the worker once it was out, or the loop


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
    assert lines[0]["error"]["message"] == (
        "could not read the peer's credentials (SO_PEERCRED); refusing the connection"
    )
    assert "result" not in lines[0]
    assert asked == [], "the policy must never be asked about a peer memd could not identify"
    assert stats["unidentified"] == 1
    assert stats["accepted"] == 0


# --- admission: the connection cap, the policy, a reload that changes the policy -----------------------------------


class Session:
    """A real server on a real socket, and raw clients: what each client was sent, line by line, and whether memd
    then closed the connection."""

    def __init__(self, authorize: Callable[[Peer], bool], limits: Limits = LIMITS) -> None:
        self.stand = Stand()
        self.authorize = authorize
        self.limits = limits

    async def __aenter__(self) -> Session:
        self._tmp = tempfile.TemporaryDirectory()
        self.path = str(Path(self._tmp.name) / "s.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(self.path)
        self.server = Server(self.stand.dispatch, self.authorize, self.limits, TASKLESS)
        await self.server.start(listener)
        self.clients: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        return self

    async def __aexit__(self, *exc: object) -> None:
        for _, writer in self.clients:
            writer.close()
        self.server.stop_accepting()
        await self.server.drain(1.0)
        self._tmp.cleanup()

    def handled(self) -> int:
        stats = self.server.stats
        return sum(stats[k] for k in ("accepted", "refused", "denied", "unidentified"))

    async def connect(self) -> int:
        """Connect, and wait until memd's side (on this loop) has admitted or refused the connection."""
        before = self.handled()
        self.clients.append(await asyncio.open_unix_connection(self.path))
        deadline = asyncio.get_running_loop().time() + 5
        while self.handled() == before:
            assert asyncio.get_running_loop().time() < deadline, "memd never took the connection"
            await asyncio.sleep(0.001)
        return len(self.clients) - 1

    async def ask(self, client: int, request: dict[str, Any]) -> dict[str, Any] | None:
        """Send one request and read one line (None: memd closed the connection without a line)."""
        reader, writer = self.clients[client]
        writer.write(json.dumps(request).encode() + b"\n")
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), 5)
        return json.loads(line) if line else None

    async def read_rest(self, client: int) -> tuple[list[dict[str, Any]], bool]:
        """Lines memd sends without being asked, and whether it then closed the connection."""
        reader, _ = self.clients[client]
        lines: list[dict[str, Any]] = []
        try:
            while line := await asyncio.wait_for(reader.readline(), 2):
                lines.append(json.loads(line))
        except ConnectionResetError:
            return lines, True
        except TimeoutError:
            return lines, False
        return lines, True


def refused(code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}


def test_a_connection_over_the_cap_is_refused_busy_with_the_limit_named_and_counted() -> None:
    from dataclasses import replace

    from memd.errors import BUSY

    async def go() -> None:
        async with Session(lambda peer: True, replace(LIMITS, max_connections=2)) as s:
            first, second = await s.connect(), await s.connect()
            third, fourth = await s.connect(), await s.connect()

            for over in (third, fourth):
                assert await s.read_rest(over) == (
                    [refused(BUSY, "too many connections (limit 2); retry shortly")],
                    True,
                )
            assert (await s.ask(first, call("now", 1, n=1)) or {}).get("result") == {"n": 1}
            assert (await s.ask(second, call("now", 2, n=2)) or {}).get("result") == {"n": 2}
            assert len(s.server.connections) == 2
            assert {k: s.server.stats[k] for k in ("accepted", "refused", "denied")} == {
                "accepted": 2,
                "refused": 2,
                "denied": 0,
            }

    asyncio.run(go())


def test_a_peer_the_policy_denies_is_refused_with_its_uid_logged_and_counted_and_never_dispatched(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import os

    caplog.set_level("WARNING", logger="memd.server")
    asked: list[Peer] = []

    async def go() -> None:
        async with Session(lambda peer: asked.append(peer) and False) as s:
            for client in (await s.connect(), await s.connect()):
                assert await s.read_rest(client) == (
                    [refused(ACCESS_DENIED, f"uid {os.getuid()} is not allowed to use this memd socket")],
                    True,
                )
            assert s.server.connections == set()
            assert {k: s.server.stats[k] for k in ("accepted", "refused", "denied")} == {
                "accepted": 0,
                "refused": 0,
                "denied": 2,
            }
            assert s.stand.turns == []

    asyncio.run(go())
    assert [(peer.uid, peer.gid, peer.pid) for peer in asked] == [(os.getuid(), os.getgid(), os.getpid())] * 2
    assert [r.getMessage() for r in caplog.records] == [
        f"denied connection from uid {os.getuid()} gid {os.getgid()} pid {os.getpid()}"
    ] * 2


def test_after_a_reload_each_open_connection_is_checked_once_before_its_next_request(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import os

    caplog.set_level("WARNING", logger="memd.server")
    allowed = {"now": True}
    asked: list[int] = []

    def authorize(peer: Peer) -> bool:
        asked.append(peer.uid)
        return allowed["now"]

    async def go() -> None:
        async with Session(authorize) as s:
            kept, dropped = await s.connect(), await s.connect()
            assert (await s.ask(kept, call("now", 1, n=1)) or {}).get("result") == {"n": 1}
            assert len(asked) == 2  # once each, at admission

            s.server.recheck_peers()  # a reload that still admits everyone
            assert (await s.ask(kept, call("now", 2, n=2)) or {}).get("result") == {"n": 2}
            assert (await s.ask(kept, call("now", 3, n=3)) or {}).get("result") == {"n": 3}
            assert len(asked) == 3  # checked again once, before its first request after the reload

            allowed["now"] = False
            s.server.recheck_peers()  # a second reload, which denies this uid
            dispatched = len(s.stand.turns)
            message = f"uid {os.getuid()} is no longer allowed to use this memd socket (the config was reloaded)"
            for client in (kept, dropped):  # admitted again at the first reload, and never checked since admission
                assert await s.ask(client, call("now", 4, n=4)) == refused(ACCESS_DENIED, message)
                assert await s.read_rest(client) == ([], True)

            assert len(s.stand.turns) == dispatched, "a refused request must not reach a handler"
            assert s.server.stats["denied"] == 2
            assert [r.getMessage() for r in caplog.records] == [
                f"uid {os.getuid()} is no longer allowed (config reloaded); closing its connection"
            ] * 2

    asyncio.run(go())


def test_a_refusal_comes_after_the_answers_already_owed_and_nothing_after_it_is_read() -> None:
    from dataclasses import replace

    from memd.errors import REQUEST_TOO_LARGE

    async def go() -> None:
        async with Session(lambda peer: True, replace(LIMITS, max_request_bytes=200)) as s:
            client = await s.connect()
            _, writer = s.clients[client]
            s.stand.release = asyncio.get_running_loop().create_future()
            too_long = json.dumps(call("now", 2, pad="x" * 300)).encode()
            writer.write(json.dumps(call("later", 1, n=1)).encode() + b"\n" + too_long + b"\n")
            writer.write(json.dumps(call("now", 3, n=3)).encode() + b"\n")
            await writer.drain()
            await asyncio.sleep(0.05)  # refused meanwhile, its answer to id 1 still owed: nothing more is read
            writer.write(json.dumps(call("now", 4, n=4)).encode() + b"\n")
            asyncio.get_running_loop().call_later(0.1, s.stand.release.set_result, "yes")

            lines, closed = await s.read_rest(client)

            assert lines == [
                {"jsonrpc": "2.0", "id": 1, "result": {"released": "yes", "n": 1}},
                refused(REQUEST_TOO_LARGE, "request line exceeds 200 bytes (server.max_request_bytes); closing"),
            ]
            assert closed
            assert s.server.connections == set()

    asyncio.run(go())


def test_two_peers_whose_credentials_cannot_be_read_are_each_logged_with_the_reason_and_counted(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import memd.server

    caplog.set_level("WARNING", logger="memd.server")
    failure = OSError(errno.EBADF, "Bad file descriptor")

    def unreadable(sock: Any) -> Peer:
        raise failure

    monkeypatch.setattr(memd.server, "peer_of", unreadable)

    async def go() -> None:
        async with Session(lambda peer: True) as s:
            for client in (await s.connect(), await s.connect()):
                lines, closed = await s.read_rest(client)
                assert closed and [line["error"]["code"] for line in lines] == [ACCESS_DENIED]
            assert s.server.stats["unidentified"] == 2

    asyncio.run(go())
    assert [r.getMessage() for r in caplog.records] == [
        f"refused a connection: could not read the peer's credentials: {failure!r}"
    ] * 2


def test_a_connection_that_never_sends_anything_is_closed_once_idle() -> None:
    from dataclasses import replace

    async def go() -> None:
        async with Session(lambda peer: True, replace(LIMITS, idle_timeout=0.2)) as s:
            silent = await s.connect()

            assert await s.read_rest(silent) == ([], True)  # within the 2 s read_rest waits: the sweep closed it
            assert s.server.connections == set()

    asyncio.run(go())
