"""The wire protocol of a real daemon, spoken over raw sockets: framing, errors, notifications and limits.

JSON-RPC 2.0, one UTF-8 JSON object per `\\n`-terminated line (memd/protocol.py). Timeouts are checked with a
bounded wait for the daemon to close the connection, never by sleeping and asserting on elapsed time.
"""

from __future__ import annotations

import json
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import LOOPS, RunningDaemon, base_config, running_for_module, wait_for

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
UNKNOWN_WORKSPACE = -32001
REQUEST_TOO_LARGE = -32003
BUSY = -32004

CLOSE_WAIT = 5.0  # bounded wait for the daemon to close a connection it should close


# --- helpers ---------------------------------------------------------------------------------------------------


def request(method: str, request_id: Any = None, **params: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if request_id is not None:
        obj["id"] = request_id
    return obj


def line(obj: Any) -> bytes:
    # ensure_ascii: a lone surrogate goes over the wire as the JSON escape, as any client would send it
    return json.dumps(obj, ensure_ascii=True).encode("utf-8") + b"\n"


class Wire:
    """A raw connection to the daemon: send bytes or request objects, read response lines one by one."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def send(self, *objs: Any) -> None:
        self.sock.sendall(b"".join(line(obj) for obj in objs))

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read(self) -> dict[str, Any]:
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise AssertionError(f"the daemon closed the connection; unread bytes: {self.buffer!r}")
            self.buffer += chunk
        raw, _, self.buffer = self.buffer.partition(b"\n")
        response = json.loads(raw)
        assert isinstance(response, dict)
        return response

    def read_many(self, count: int) -> list[dict[str, Any]]:
        return [self.read() for _ in range(count)]

    def call(self, method: str, request_id: Any = 1, **params: Any) -> dict[str, Any]:
        self.send(request(method, request_id, **params))
        return self.read()

    def is_closed_by_daemon(self, timeout: float = CLOSE_WAIT) -> bool:
        """True when the daemon closes the connection within `timeout` (bytes sent before that stay readable)."""
        self.sock.settimeout(timeout)
        try:
            while chunk := self.sock.recv(65536):
                self.buffer += chunk
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True
        return True

    def close(self) -> None:
        self.sock.close()


Connect = Callable[[RunningDaemon], Wire]


@pytest.fixture
def connect() -> Iterator[Connect]:
    """Open raw connections to a daemon; every one is closed when the test ends."""
    opened: list[Wire] = []

    def open_wire(daemon: RunningDaemon) -> Wire:
        conn = Wire(daemon.raw_socket())
        opened.append(conn)
        return conn

    yield open_wire
    for conn in opened:
        conn.close()


def error_of(response: dict[str, Any]) -> dict[str, Any]:
    assert "error" in response, f"expected an error, got {response}"
    assert "result" not in response
    return response["error"]


def tree(root: Path) -> set[str]:
    """Every path under `root`, except what memd changes on its own schedule (snapshot repos, state, temp files)."""
    paths = (p.relative_to(root) for p in root.rglob("*"))
    return {
        str(p)
        for p in paths
        if ".git" not in p.parts and "state" not in p.parts and ".memd-tmp-" not in p.name and p.name != "daemon.log"
    }


@pytest.fixture(scope="module")
def module_root() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="memd-") as d:
        yield Path(d)


@pytest.fixture(scope="module")
def memd(module_root: Path) -> Iterator[RunningDaemon]:
    """One daemon with default limits, shared by the tests that do not change its configuration."""
    root = module_root / "default"
    with running_for_module(root, base_config(root)) as daemon:
        yield daemon


@pytest.fixture(scope="module", params=LOOPS)
def each_loop(module_root: Path, request: pytest.FixtureRequest) -> Iterator[RunningDaemon]:
    """A daemon with default limits on each event loop (uvloop, asyncio): what depends on the loop's transports
    (pipelining, backpressure, slow and vanishing clients, many connections) is tested on both."""
    root = module_root / f"loop-{request.param}"
    with running_for_module(root, base_config(root, daemon={"loop": request.param})) as daemon:
        yield daemon


@pytest.fixture(scope="module", params=LOOPS)
def limited(module_root: Path, request: pytest.FixtureRequest) -> Iterator[RunningDaemon]:
    """A daemon with a 4 KiB request cap and a 0.5 s partial-request timeout, on each event loop."""
    root = module_root / f"limited-{request.param}"
    server = {"max_request_bytes": 4096, "request_timeout_seconds": 0.5}
    with running_for_module(root, base_config(root, server=server, daemon={"loop": request.param})) as daemon:
        yield daemon


# --- framing ---------------------------------------------------------------------------------------------------


def test_fifty_pipelined_requests_get_fifty_responses_in_request_order(
    connect: Connect, each_loop: RunningDaemon
) -> None:
    conn = connect(each_loop)
    requests = [
        request("warm.log", i, workspace="alpha", action=f"pipelined {i}") if i % 2 else request("ping", f"p{i}")
        for i in range(50)
    ]
    conn.send(*requests)  # one sendall: writes and cheap reads interleaved

    responses = conn.read_many(50)

    assert [r["id"] for r in responses] == [r["id"] for r in requests]
    for req, resp in zip(requests, responses, strict=True):
        assert resp["jsonrpc"] == "2.0"
        if req["method"] == "ping":
            assert resp["result"]["pong"] is True
        else:
            assert resp["result"]["entry"]["action"] == req["params"]["action"]


def test_a_client_pipelining_large_reads_without_reading_is_held_at_its_answers_and_then_gets_them_all(
    connect: Connect, each_loop: RunningDaemon
) -> None:
    for i in range(40):  # about 40 kB of context per answer
        each_loop.call("warm.log", workspace="alpha", action=f"bulk {i}", result="lorem ipsum dolor sit amet " * 34)
    before = each_loop.call("status")["server"]["requests"]
    hog = connect(each_loop)
    hog.send(*(request("context.get", i, workspace="alpha") for i in range(300)))  # 300 lines: one read for memd

    def dispatched() -> int:
        return int(each_loop.call("status")["server"]["requests"]) - before

    seen: list[int] = []

    def settled() -> bool:  # status calls count too: one per poll
        seen.append(dispatched() - len(seen) - 1)
        return len(seen) >= 3 and seen[-1] == seen[-2] == seen[-3]

    wait_for(settled, "memd to stop dispatching the client's requests", interval=0.05)

    assert seen[-1] < 100  # held by its unread answers, not the 300 it sent (64 in flight is the documented cap)
    answers = hog.read_many(300)
    assert [a["id"] for a in answers] == list(range(300))
    assert all("result" in a for a in answers)


def test_a_request_sent_byte_by_byte_is_answered_once_complete(connect: Connect, memd: RunningDaemon) -> None:
    conn = connect(memd)
    data = line(request("warm.log", 7, workspace="alpha", action="sent byte by byte"))
    for i in range(len(data)):
        conn.send_bytes(data[i : i + 1])

    response = conn.read()

    assert response["id"] == 7
    assert response["result"]["entry"]["action"] == "sent byte by byte"


def test_a_request_split_across_sends_inside_a_multibyte_character_is_decoded_whole(
    connect: Connect, memd: RunningDaemon
) -> None:
    conn = connect(memd)
    data = (
        json.dumps(request("warm.log", 8, workspace="alpha", action="café über"), ensure_ascii=False).encode() + b"\n"
    )
    cut = data.index("é".encode()) + 1  # between the two bytes of "é"
    conn.send_bytes(data[:10])
    conn.send_bytes(data[10:cut])
    conn.send_bytes(data[cut:])

    assert conn.read()["result"]["entry"]["action"] == "café über"


def test_several_requests_in_one_write_are_all_answered_and_blank_lines_are_ignored(
    connect: Connect, memd: RunningDaemon
) -> None:
    conn = connect(memd)
    conn.send_bytes(
        b"\n\n"
        + line(request("ping", 1))
        + b"   \n\t\n"
        + line(request("hot.get", 2, workspace="alpha"))
        + b"\n"
        + line(request("ping", 3))
    )

    responses = conn.read_many(3)

    assert [r["id"] for r in responses] == [1, 2, 3]
    assert all("result" in r for r in responses)
    conn.send(request("ping", 4))
    assert conn.read()["id"] == 4  # nothing was owed for the blank lines


def test_a_crlf_terminated_request_and_null_params_are_accepted(connect: Connect, memd: RunningDaemon) -> None:
    conn = connect(memd)
    conn.send_bytes(b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": null}\r\n')

    assert conn.read()["result"]["pong"] is True


def test_a_request_with_a_null_id_is_not_a_notification_and_is_answered_with_a_null_id(
    connect: Connect, memd: RunningDaemon
) -> None:
    conn = connect(memd)
    conn.send({"jsonrpc": "2.0", "id": None, "method": "ping"})

    response = conn.read()

    assert response["id"] is None
    assert response["result"]["pong"] is True


def test_a_notification_is_never_answered_whether_it_succeeds_or_fails(connect: Connect, memd: RunningDaemon) -> None:
    conn = connect(memd)
    conn.send(
        request("ping"),
        request("warm.log", workspace="beta", action="logged by a notification"),
        request("no.such.method"),
        request("warm.log", workspace="beta"),  # no action: invalid params
        request("hot.get", workspace="no-such-workspace"),
        request("ping", 7),
    )

    # Responses keep request order: anything owed for a notification would come before the answer to id 7.
    first = conn.read()
    assert first["id"] == 7, f"a notification was answered: {first}"
    assert first["result"]["pong"] is True
    conn.send(request("ping", 8))
    assert conn.read()["id"] == 8


def _actions(daemon: RunningDaemon, workspace: str) -> list[str]:
    days = daemon.call("warm.recent", workspace=workspace)["days"]
    return [entry["action"] for day in days for entry in day["entries"]]


def test_a_notification_is_carried_out(connect: Connect, memd: RunningDaemon) -> None:
    connect(memd).send(request("warm.log", workspace="beta", action="written by a notification"))

    for _ in range(100):  # the notification's write is made (poll, bounded; nothing tells when it is done)
        if "written by a notification" in _actions(memd, "beta"):
            break
        _pause(0.05)
    assert "written by a notification" in _actions(memd, "beta")


@pytest.mark.parametrize(
    "payload",
    [
        b'{"jsonrpc": "2.0", "id": 1, "method": "ping\xff"}',
        b"\xc0\xaf\xfe\xff",
        b'{"jsonrpc": "2.0", "id": 1, "method": "warm.log", '
        b'"params": {"workspace": "alpha", "action": "\xed\xa0\x80"}}',
    ],
    ids=["stray-byte", "overlong", "encoded-surrogate"],
)
def test_a_line_that_is_not_utf8_gets_a_parse_error(connect: Connect, memd: RunningDaemon, payload: bytes) -> None:
    conn = connect(memd)
    conn.send_bytes(payload + b"\n")

    response = conn.read()

    assert error_of(response)["code"] == PARSE_ERROR
    assert "UTF-8" in response["error"]["message"]
    assert conn.call("ping", 2)["result"]["pong"] is True


@pytest.mark.parametrize(
    "payload",
    [
        json.dumps(request("warm.log", 1, workspace="alpha", action="é in UTF-16")).encode("utf-16"),
        b'{"jsonrpc": "2.0", "id": 1, "method": "warm.log", '
        b'"params": {"workspace": "alpha", "action": "\xed\xa0\x80"}}',
    ],
    ids=["utf-16", "encoded-surrogate"],
)
def test_a_request_in_another_encoding_than_utf8_gets_a_parse_error(
    connect: Connect, memd: RunningDaemon, payload: bytes
) -> None:
    with pytest.raises(UnicodeDecodeError):
        payload.decode("utf-8")  # the line really is not UTF-8
    conn = connect(memd)
    conn.send_bytes(payload + b"\n")

    assert error_of(conn.read())["code"] == PARSE_ERROR


def test_a_batch_array_is_rejected_as_not_supported(connect: Connect, memd: RunningDaemon) -> None:
    conn = connect(memd)
    conn.send([request("ping", 1), request("ping", 2)])

    response = conn.read()

    error = error_of(response)
    assert error["code"] == INVALID_REQUEST
    assert "batch" in error["message"] and "not supported" in error["message"]
    assert conn.call("ping", 3)["result"]["pong"] is True


@pytest.mark.parametrize(
    "obj",
    [
        {"id": 5, "method": "ping", "params": {}},
        {"jsonrpc": "1.0", "id": 5, "method": "ping"},
        {"jsonrpc": "2.0", "id": 5, "params": {}},
        {"jsonrpc": "2.0", "id": 5, "method": ""},
        {"jsonrpc": "2.0", "id": 5, "method": 42},
        {"jsonrpc": "2.0", "id": 5, "method": "ping", "params": ["alpha"]},
        {"jsonrpc": "2.0", "id": 5, "method": "ping", "params": "alpha"},
    ],
    ids=["no-jsonrpc", "jsonrpc-1.0", "no-method", "empty-method", "method-not-string", "params-list", "params-str"],
)
def test_a_malformed_request_object_is_an_invalid_request_answered_with_its_id(
    connect: Connect, memd: RunningDaemon, obj: dict[str, Any]
) -> None:
    response = _send_one(connect, memd, obj)

    assert error_of(response)["code"] == INVALID_REQUEST
    assert response["id"] == 5


def _send_one(connect: Connect, daemon: RunningDaemon, obj: Any) -> dict[str, Any]:
    conn = connect(daemon)
    conn.send(obj)
    return conn.read()


@pytest.mark.parametrize("obj", [42, "ping", None, {"jsonrpc": "2.0", "id": [1], "method": "ping"}])
def test_a_line_that_is_not_a_request_object_is_an_invalid_request(
    connect: Connect, memd: RunningDaemon, obj: Any
) -> None:
    response = _send_one(connect, memd, obj)

    assert error_of(response)["code"] == INVALID_REQUEST
    assert response["id"] is None


def test_an_unknown_method_is_method_not_found(connect: Connect, memd: RunningDaemon) -> None:
    response = connect(memd).call("memory.erase_everything", 9, workspace="alpha")

    assert response["id"] == 9
    error = error_of(response)
    assert error["code"] == METHOD_NOT_FOUND
    assert "memory.erase_everything" in error["message"]


@pytest.mark.parametrize(
    ("method", "params", "named"),
    [
        ("warm.log", {"workspace": "alpha", "action": 5}, "action"),
        ("warm.log", {"workspace": "alpha"}, "action"),
        ("warm.log", {"workspace": "alpha", "acton": "typo"}, "acton"),
        ("warm.log", {"workspace": "alpha", "action": "x", "details": {"nested": {"a": 1}}}, "nested"),
        ("warm.log", {"workspace": "alpha", "action": "x", "details": ["a"]}, "details"),
        ("warm.recent", {"workspace": "alpha", "days": "3"}, "days"),
        ("progress.update", {"workspace": "alpha", "files": [1, 2]}, "files"),
        ("decision.record", {"workspace": "alpha", "action": "x", "reason": None}, "reason"),
        ("hot.note", {"workspace": "alpha", "text": "a\x00b"}, "text"),
        ("ping", {"workspace": "alpha"}, "workspace"),
    ],
    ids=[
        "wrong-type",
        "missing",
        "unknown-name",
        "detail-not-scalar",
        "details-not-object",
        "days-not-int",
        "list-of-non-strings",
        "required-null",
        "nul-in-text",
        "param-on-ping",
    ],
)
def test_bad_params_are_invalid_params_and_the_message_names_the_parameter(
    connect: Connect, memd: RunningDaemon, method: str, params: dict[str, Any], named: str
) -> None:
    response = connect(memd).call(method, 3, **params)

    error = error_of(response)
    assert error["code"] == INVALID_PARAMS
    assert named in error["message"]


def test_a_text_parameter_with_a_lone_surrogate_is_invalid_params(connect: Connect, memd: RunningDaemon) -> None:
    response = connect(memd).call("hot.note", 4, workspace="beta", text="half a pair \ud800")

    assert error_of(response)["code"] == INVALID_PARAMS


def test_one_bad_write_does_not_fail_the_writes_batched_with_it(connect: Connect, memd: RunningDaemon) -> None:
    conn = connect(memd)
    conn.send(  # one sendall: the three writes reach the workspace writer as one batch
        request("warm.log", 1, workspace="beta", action="good before"),
        request("warm.log", 2, workspace="beta", action="bad \ud800"),
        request("warm.log", 3, workspace="beta", action="good after"),
    )

    first, _, last = conn.read_many(3)

    assert first["result"]["entry"]["action"] == "good before"
    assert last["result"]["entry"]["action"] == "good after"


# --- workspaces --------------------------------------------------------------------------------------------------


def test_an_unknown_workspace_is_reported_with_its_code(connect: Connect, memd: RunningDaemon) -> None:
    response = connect(memd).call("hot.get", 1, workspace="gamma")

    error = error_of(response)
    assert error["code"] == UNKNOWN_WORKSPACE
    assert "gamma" in error["message"]
    assert error["data"] == {"workspace": "gamma"}


@pytest.mark.parametrize("name", ["../x", "/etc", "a\x00b", "alpha/../beta", "alpha/", "./alpha", "..", "ALPHA"])
@pytest.mark.parametrize("method", ["hot.note", "hot.get"])
def test_a_path_like_workspace_name_is_unknown_and_creates_nothing(
    connect: Connect, memd: RunningDaemon, module_root: Path, name: str, method: str
) -> None:
    before = tree(module_root)
    outside = Path.cwd().parent / "x"
    existed = outside.exists()
    params = {"workspace": name, "text": "escape attempt"} if method == "hot.note" else {"workspace": name}

    response = connect(memd).call(method, 1, **params)

    assert error_of(response)["code"] == UNKNOWN_WORKSPACE
    assert tree(module_root) == before
    assert outside.exists() == existed


# --- limits -------------------------------------------------------------------------------------------------------


def test_an_oversized_line_gets_request_too_large_and_the_connection_is_closed(
    connect: Connect, limited: RunningDaemon
) -> None:
    conn = connect(limited)
    big = line(request("warm.log", 1, workspace="alpha", action="a" * 400, result="b" * 9_500))
    assert len(big) > 10_000

    conn.send_bytes(big)

    response = conn.read()
    error = error_of(response)
    assert error["code"] == REQUEST_TOO_LARGE
    assert response["id"] is None
    assert "4096" in error["message"]
    assert conn.is_closed_by_daemon()
    assert conn.buffer == b""  # nothing after the error line


def test_responses_owed_before_an_oversized_line_are_sent_first(connect: Connect, limited: RunningDaemon) -> None:
    conn = connect(limited)
    conn.send_bytes(line(request("ping", 1)) + b'{"jsonrpc": "2.0", "padding": "' + b"x" * 10_000 + b'"}\n')

    assert conn.read()["id"] == 1
    assert error_of(conn.read())["code"] == REQUEST_TOO_LARGE
    assert conn.is_closed_by_daemon()


def test_an_over_limit_partial_line_without_newline_gets_request_too_large_and_is_closed(
    connect: Connect,
    limited: RunningDaemon,
) -> None:
    conn = connect(limited)
    conn.send_bytes(b'{"jsonrpc": "2.0", "id": 1, "method": "warm.log", "params": {"action": "' + b"a" * 5_000)

    assert error_of(conn.read())["code"] == REQUEST_TOO_LARGE
    assert conn.is_closed_by_daemon()


def test_a_line_just_under_the_limit_is_served(connect: Connect, limited: RunningDaemon) -> None:
    conn = connect(limited)
    data = line(request("warm.log", 1, workspace="alpha", action="near the limit", result=""))
    data = data.replace(b'"result": ""', b'"result": "' + b"r" * (4096 + 1 - len(data)) + b'"')
    assert len(data) == 4096 + 1  # 4096 bytes of request plus the newline

    assert conn.call("ping", 0)["id"] == 0
    conn.send_bytes(data)
    assert conn.read()["result"]["entry"]["action"] == "near the limit"


def test_a_stalled_half_request_is_closed_while_other_clients_are_served(
    connect: Connect, limited: RunningDaemon
) -> None:
    stalled = connect(limited)
    data = line(request("ping", 1))
    stalled.send_bytes(data[: len(data) // 2])

    other = connect(limited)
    assert other.call("ping", 2)["result"]["pong"] is True

    assert stalled.is_closed_by_daemon()
    assert stalled.buffer == b""  # the half request got no answer
    assert other.call("ping", 3)["result"]["pong"] is True


@pytest.mark.parametrize("loop", LOOPS)
def test_an_idle_connection_is_closed_after_the_idle_timeout(
    connect: Connect, make_daemon: Callable[..., RunningDaemon], short_root: Path, loop: str
) -> None:
    daemon = make_daemon(
        "idle", config=base_config(short_root / "idle", server={"idle_timeout_seconds": 0.5}, daemon={"loop": loop})
    )
    conn = connect(daemon)
    assert conn.call("ping", 1)["result"]["pong"] is True

    assert conn.is_closed_by_daemon()
    assert connect(daemon).call("ping", 2)["result"]["pong"] is True


@pytest.mark.parametrize("loop", LOOPS)
def test_a_client_that_is_slow_to_read_its_answers_is_not_closed_as_idle_while_answers_are_owed(
    connect: Connect, make_daemon: Callable[..., RunningDaemon], short_root: Path, loop: str
) -> None:
    daemon = make_daemon(
        "owed", config=base_config(short_root / "owed", server={"idle_timeout_seconds": 0.5}, daemon={"loop": loop})
    )
    for i in range(40):  # about 40 kB of context per answer: a few fill the socket, the rest wait in memd
        daemon.call("warm.log", workspace="alpha", action=f"bulk {i}", result="lorem ipsum dolor sit amet " * 34)
    slow = connect(daemon)
    slow.send(*(request("context.get", i, workspace="alpha") for i in range(100)))

    _pause(2.0)  # four idle timeouts without reading a byte

    answers = slow.read_many(100)
    assert [a["id"] for a in answers] == list(range(100))


def _accepted_connection(connect: Connect, daemon: RunningDaemon, deadline_seconds: float = CLOSE_WAIT) -> Wire:
    """A connection that answered a ping; retried while the daemon still counts connections closing elsewhere."""
    for _ in range(int(deadline_seconds / 0.05)):
        conn = connect(daemon)
        response = conn.call("ping", "accepted?")
        if "result" in response:
            return conn
        assert error_of(response)["code"] == BUSY
        conn.close()
        _pause(0.05)
    raise AssertionError(f"no connection was accepted within {deadline_seconds}s")


def _pause(seconds: float) -> None:
    """Back off between polls (never used to assert on timing)."""
    threading.Event().wait(seconds)


@pytest.mark.parametrize("loop", LOOPS)
def test_connections_over_the_cap_get_busy_and_are_closed_until_one_leaves(
    connect: Connect, make_daemon: Callable[..., RunningDaemon], short_root: Path, loop: str
) -> None:
    daemon = make_daemon(
        "cap", config=base_config(short_root / "cap", server={"max_connections": 4}, daemon={"loop": loop})
    )
    held = [_accepted_connection(connect, daemon) for _ in range(4)]

    fifth = connect(daemon)
    response = fifth.read()
    error = error_of(response)
    assert error["code"] == BUSY
    assert response["id"] is None
    assert "4" in error["message"]
    assert fifth.is_closed_by_daemon()

    held.pop().close()
    replacement = _accepted_connection(connect, daemon)
    for conn in [*held, replacement]:
        assert conn.call("ping", "still here")["result"]["pong"] is True


# --- robustness ---------------------------------------------------------------------------------------------------


def test_a_client_that_disconnects_mid_request_does_not_affect_others(
    connect: Connect, each_loop: RunningDaemon
) -> None:
    other = connect(each_loop)
    assert other.call("ping", 1)["result"]["pong"] is True

    half = connect(each_loop)
    data = line(request("warm.log", 1, workspace="alpha", action="never finished"))
    half.send_bytes(data[: len(data) // 2])
    half.close()

    gone = connect(each_loop)
    gone.send(request("warm.log", 1, workspace="alpha", action="sent then hung up"))
    gone.close()  # never reads its response (whether that write is committed is not promised)

    assert other.call("ping", 2)["result"]["pong"] is True
    assert connect(each_loop).call("ping", 3)["result"]["pong"] is True
    assert "result" in other.call("warm.log", 4, workspace="alpha", action="after the hang-ups")
    actions = [e["action"] for e in other.call("warm.recent", 5, workspace="alpha")["result"]["days"][0]["entries"]]
    assert "after the hang-ups" in actions
    assert "never finished" not in actions  # half a line is never executed


def test_two_hundred_concurrent_connections_are_all_served(connect: Connect, each_loop: RunningDaemon) -> None:
    conns = [connect(each_loop) for _ in range(200)]
    try:
        for round_ in range(3):
            for i, conn in enumerate(conns):
                conn.send(request("ping", f"{i}-{round_}"))
            for i, conn in enumerate(conns):
                response = conn.read()
                assert response["id"] == f"{i}-{round_}"
                assert response["result"]["pong"] is True
    finally:
        for conn in conns:
            conn.close()
