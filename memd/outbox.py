"""One connection's answers, in request order, and the two ways they leave it: the loop writes finished answers
to the transport (`flush`), and the worker thread that has an answer (the one that made a write durable, a
search's query thread) may send it itself (`send_early`, memd.early_ack).

The two never interleave. They take turns on the outbox's send lock. A worker sends only the oldest answer owed
(answers before it that a worker sent whole do not count), only while the loop has not taken that answer up
(`claim`) and nothing the loop wrote is still unsent, and it writes to a duplicate of the socket, made on its first
send and closed when the connection is lost (so a closed connection's number is never written to). The worker calls
no transport method: whether the loop left bytes unsent is a flag the loop keeps (asyncio changes its write buffer
in two steps, and a worker reading it between them could send into the middle of an answer). A partial early send is
finished by the loop.
Imports nothing from memd.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections import deque
from typing import Protocol

_SEND_EARLY = socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL  # never block the worker; a closed peer is an error


class Transport(Protocol):
    """What the outbox uses of an asyncio (or uvloop) transport, on the loop only."""

    def write(self, data: bytes) -> None: ...
    def is_closing(self) -> bool: ...
    def get_write_buffer_size(self) -> int: ...


class Reply:
    """One response slot, in request order: bytes to send, None for a notification, unset while pending. `early`:
    the answer a worker sent itself (`early_sent` bytes of it went out; the loop sends the rest)."""

    __slots__ = ("answered", "claimed", "done", "early", "early_sent", "payload", "started")

    def __init__(self) -> None:
        self.done = False
        self.claimed = False  # the loop took the answer up (under the send lock): no worker sends it any more
        self.payload: bytes | None = None
        self.started = time.perf_counter()
        self.early: bytes | None = None
        self.early_sent = 0
        self.answered = 0.0  # when a worker sent the early answer (perf_counter)

    def set(self, payload: bytes | None) -> None:
        self.payload = payload
        self.done = True


class Outbox:
    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.owed = 0  # slots added and not yet flushed: the connection's requests in flight
        self._send_lock = threading.Lock()
        self._fd = -1  # the connection's socket, open until `lost` (both loops close it after)
        self._early_socket: socket.socket | None = None  # its duplicate, made by the first early send
        self._lost = False
        self._unsent = False  # the loop's last write left bytes in the transport (kept by the loop, under the lock)

    def attach(self, fd: int) -> None:
        """The connection's socket (-1: none to reach; its answers are then sent by the loop only)."""
        self._fd = fd

    def add(self) -> Reply:
        """A new slot at the end: the answer of the request that just arrived, or a last error line."""
        reply = Reply()
        self.replies.append(reply)
        self.owed += 1
        return reply

    def all_done(self) -> bool:
        return all(reply.done for reply in self.replies)

    def claim(self, reply: Reply) -> None:
        """On the loop, before it makes `reply`'s answer: from here on no worker sends it."""
        with self._send_lock:
            reply.claimed = True

    def send_early(self, slot: Reply, payload: bytes, closing: bool) -> bool:
        """From a worker (the one that made a write durable, a search's query thread): send `payload` as `slot`'s
        answer if it is the oldest answer owed (those before it sent whole by a worker) and nothing is buffered ahead
        of it. Never blocks: a full socket buffer (EAGAIN) or a gone peer leaves the answer to the loop.
        `closing`: the connection is being closed (the loop answers, if anyone does)."""
        with self._send_lock:
            if (
                self._lost
                or closing
                or self._fd < 0
                or self._unsent
                or slot.claimed  # the loop has taken the answer up: it sends it
                or self._first_owed() is not slot
            ):
                return False
            try:
                if self._early_socket is None:  # open: `lost`, which both loops reach before closing it, is not
                    self._early_socket = socket.socket(fileno=os.dup(self._fd))
                sent = self._early_socket.send(payload, _SEND_EARLY)
            except OSError:  # EAGAIN (the client's buffer is full), a gone peer, out of descriptors: the loop answers
                return False
            slot.early, slot.early_sent, slot.answered = payload, sent, time.perf_counter()
            return True

    def flush(self, transport: Transport | None) -> None:
        """On the loop: write every finished answer at the head of the queue (answers keep request order); of one
        a worker sent, what it could not."""
        out: list[bytes] = []
        with self._send_lock:
            while self.replies and self.replies[0].done:
                reply = self.replies.popleft()
                self.owed -= 1
                if reply.early is not None:
                    if reply.early_sent < len(reply.early):
                        out.append(reply.early[reply.early_sent :])
                elif reply.payload is not None:
                    out.append(reply.payload)
            if out and transport is not None and not transport.is_closing():
                transport.write(b"".join(out))
                self._unsent = bool(transport.get_write_buffer_size())

    def _first_owed(self) -> Reply | None:
        """Under the send lock: the oldest answer whose bytes have not all left. Answers a worker sent whole stay in
        the queue until the loop catches up with them, but nothing of theirs is left to send: an answer behind them
        may go too (a client that sends its next request as soon as it has the last answer would otherwise find it
        behind one the loop has not caught up with yet, and be answered by the loop)."""
        for reply in self.replies:
            if reply.early is None or reply.early_sent < len(reply.early):
                return reply
        return None

    def check_unsent(self, transport: Transport | None) -> None:
        """On the loop: is what it wrote all in the kernel now? Until then no worker sends on this connection."""
        if self._unsent and transport is not None and not transport.get_write_buffer_size():
            with self._send_lock:
                self._unsent = False

    def lost(self) -> None:
        """The connection is gone: no worker sends any more, and the socket's duplicate is closed."""
        with self._send_lock:
            self._lost = True
            early, self._early_socket = self._early_socket, None
        if early is not None:
            early.close()
