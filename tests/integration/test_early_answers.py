"""Writes answered by the I/O thread that made them durable (issue 17), against a real daemon on both event loops:
what a client is told is what the loop would have told it, the next request on any connection sees the write, and
pipelined requests are answered once each, in order."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harness import LOOPS, RunningDaemon, base_config

MakeDaemon = Callable[..., RunningDaemon]


def started(make_daemon: MakeDaemon, short_root: Path, loop: str) -> RunningDaemon:
    return make_daemon(loop, config=base_config(short_root / loop, daemon={"loop": loop}))


class Line:
    """A raw connection: one JSON-RPC request at a time, or many in one write."""

    def __init__(self, daemon: RunningDaemon) -> None:
        self.sock = daemon.raw_socket()
        self.file = self.sock.makefile("rb")
        self.next_id = 0

    def send(self, method: str, **params: Any) -> int:
        self.next_id += 1
        request = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        self.sock.sendall(json.dumps(request).encode() + b"\n")
        return self.next_id

    def answer(self) -> dict[str, Any]:
        line = self.file.readline()
        assert line, "the daemon closed the connection"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def call(self, method: str, **params: Any) -> Any:
        request_id = self.send(method, **params)
        answer = self.answer()
        assert answer["id"] == request_id, answer
        assert "result" in answer, answer
        return answer["result"]

    def close(self) -> None:
        self.file.close()
        self.sock.close()


@pytest.mark.parametrize("loop", LOOPS)
def test_each_acknowledged_write_is_seen_by_the_next_request_on_another_connection_with_the_same_usage(
    make_daemon: MakeDaemon, short_root: Path, loop: str
) -> None:
    daemon = started(make_daemon, short_root, loop)
    writer, reader = Line(daemon), Line(daemon)
    try:
        for i in range(40):
            kind = i % 4
            if kind == 0:
                written = writer.call("warm.log", workspace="alpha", action=f"step {i}")
                recent = reader.call("warm.recent", workspace="alpha", days=1, limit=1)
                assert recent["days"][0]["entries"][-1]["action"] == f"step {i}"
                seen = recent["usage"]
            elif kind == 1:
                written = writer.call("hot.note", workspace="alpha", text=f"note {i}")
                hot = reader.call("hot.get", workspace="alpha")
                assert hot["hot"]["notes"][-1]["text"] == f"note {i}"
                seen = hot["usage"]
            elif kind == 2:
                written = writer.call("progress.update", workspace="alpha", step=f"step {i}", pending_add=[f"p{i}"])
                hot = reader.call("hot.get", workspace="alpha")
                assert hot["hot"]["current_step"] == f"step {i}"
                assert written["current_step"] == f"step {i}" and f"p{i}" in written["pending_actions"]
                seen = hot["usage"]
            else:
                written = writer.call("decision.record", workspace="alpha", action=f"choice {i}", reason="because")
                hot = reader.call("hot.get", workspace="alpha")
                assert hot["hot"]["decisions"][-1]["action"] == f"choice {i}"
                seen = hot["usage"]
            assert written["usage"] == seen  # the figures the write was answered with are the published ones
        health = daemon.call("status")["workspaces"]["alpha"]
    finally:
        writer.close()
        reader.close()

    assert health["early_answers"] > 0  # answered by the worker: this test is about that path
    assert health["early_usage_mismatches"] == 0


@pytest.mark.parametrize("loop", LOOPS)
def test_pipelined_writes_and_reads_on_one_connection_are_answered_once_each_in_order(
    make_daemon: MakeDaemon, short_root: Path, loop: str
) -> None:
    daemon = started(make_daemon, short_root, loop)
    line = Line(daemon)
    try:
        requests: list[tuple[str, dict[str, Any]]] = []
        for i in range(300):
            if i % 5 == 4:
                requests.append(("warm.recent", {"workspace": "alpha", "days": 1, "limit": 1}))
            elif i % 7 == 6:
                requests.append(("ping", {}))
            else:
                requests.append(("warm.log", {"workspace": "alpha", "action": f"pipelined {i}"}))
        ids = []
        payload = b""
        for method, params in requests:
            line.next_id += 1
            ids.append(line.next_id)
            request = {"jsonrpc": "2.0", "id": line.next_id, "method": method, "params": params}
            payload += json.dumps(request).encode() + b"\n"
        line.sock.sendall(payload)
        answers = [line.answer() for _ in requests]
        line.sock.settimeout(0.3)
        with pytest.raises(socket.timeout):  # nothing more: no answer was sent twice
            line.sock.recv(1)
    finally:
        line.close()

    assert [a["id"] for a in answers] == ids
    assert all("result" in a for a in answers), [a for a in answers if "error" in a][:3]
    logged: set[str] = set()
    for (method, params), answer in zip(requests, answers, strict=True):
        if method == "warm.log":
            assert answer["result"]["entry"]["action"] == params["action"]
            logged.add(params["action"])
        if method == "warm.recent":  # pipelined behind writes it may not see them (docs/protocol.md), nor later ones
            days = answer["result"]["days"]
            assert not days or days[0]["entries"][-1]["action"] in logged
    status = daemon.call("status")["workspaces"]["alpha"]
    assert status["early_usage_mismatches"] == 0
