"""Acknowledging a durable write from the I/O thread that made it durable (issue 17: fewer wake-ups per write).

A write's answer does not depend on anything the loop does after the fsync: its result comes from its edit, and
the usage figures after its batch are known while the batch is on the disk (the tokens it adds are counted then).
So the loop encodes the answer while the worker waits on the disk, and the worker, once the fsync returned, sends
it to the client's socket itself: the loop's wake-up, publish and reply turn are no longer between the disk and
the client. The loop publishes the batch afterwards, and before it reads the workspace again for anyone
(`memd.writer.Completions`), so an acknowledged write is still visible to the next request.

The worker sends only when nothing on that connection must come first: the answer is the oldest one owed on the
connection (answers before it that a worker sent whole do not count) and nothing is buffered in its transport.
Anything else (an earlier answer still owed, a full socket buffer, a batch that failed or met an outside change,
usage that the batch cannot predict) leaves the answer to the loop, exactly as before. A search's query thread
answers the same way once it has the hits (memd.search.service): there the answer is prepared and sent by the
thread. Imports nothing from memd.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol


class Outlet(Protocol):
    """What a connection offers the I/O thread (memd.server.Connection)."""

    def encode_answer(self, request_id: Any, result: Any) -> bytes:
        """The response line for `result`, as the connection would send it."""
        ...

    def send_early(self, slot: Any, payload: bytes) -> bool:
        """From any thread: send `payload` as the answer of `slot` if it is the next one owed and nothing waits
        ahead of it; False leaves it to the loop. Never blocks."""
        ...


@dataclass(frozen=True, slots=True)
class ReplyTo:
    """Where the answer of one request goes: the connection, its response slot there, the request's id."""

    outlet: Outlet
    slot: Any
    request_id: Any


# (the edit's result, the workspace's usage once the batch is published) -> the method's result
Answer = Callable[[Any, Mapping[str, Any]], dict[str, Any]]


@dataclass(slots=True)
class EarlyAck:
    """One request's answer, prepared on the loop while its batch is on the disk, sent by the worker after."""

    reply_to: ReplyTo
    answer: Answer
    payload: bytes | None = None  # set on the loop once encoded; the worker sends only what is set by then
    sent: bool = False  # the worker sent it (whole or in part: the connection finishes a partial send)

    def prepare(self, result: Any, usage: Mapping[str, Any]) -> None:
        to = self.reply_to
        self.payload = to.outlet.encode_answer(to.request_id, self.answer(result, usage))

    def send(self) -> None:
        """In the worker thread, after the batch's fsync: send the prepared answer if the connection may."""
        payload = self.payload
        if payload is not None:
            self.sent = self.reply_to.outlet.send_early(self.reply_to.slot, payload)
