"""The Unix-socket server: framing, limits, peer credentials, ordered responses. No memory logic lives here.

Built on asyncio's Protocol API (about half the per-request cost of streams, LIMITS.md). Each complete line is
dispatched at once, so a client that pipelines writes lets them join one group commit; responses are still
written in request order. Methods the daemon names "taskless" (handlers that only await futures, never a
timeout or a lock that needs a Task) run without a Task: each Task costs two loop turns, and a single client
pays every turn in latency. Limits: a line over `max_request_bytes` gets -32003 and the connection is closed; a
partial line that stalls for `request_timeout_seconds`, or a connection idle for `idle_timeout_seconds`, is
closed; connections over `max_connections` get -32004 and are closed. A peer whose credentials cannot be read
(SO_PEERCRED fails) gets -32002 and is closed, whatever the policy: memd fails closed, never guesses a peer. One
connection's failure never touches another. After a reload (`recheck_peers`) each connection's peer is checked
again before its next request; one the new config no longer allows gets -32002 and is closed. Each answered
request is reported to `observe` (method, error code or None, seconds since its line arrived): the daemon's
metrics. Runs on asyncio's own loop and on uvloop alike: only the Transport methods both provide are used (uvloop's
transports are not `asyncio.Transport` instances, and its `get_extra_info("socket")` is a socket-like object
that `peer_of` reads the same way). The answers themselves, in request order, and the send a write's worker makes
itself once the write is durable (memd.early_ack), are each connection's `Outbox` (memd.outbox).
Imports memd.peercred, memd.handlers, memd.early_ack, memd.outbox, memd.protocol and memd.errors.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, cast

from memd import protocol
from memd.early_ack import ReplyTo
from memd.errors import (
    ACCESS_DENIED,
    BUSY,
    INTERNAL_ERROR,
    REQUEST_TOO_LARGE,
    MemdError,
)
from memd.handlers import Peer
from memd.outbox import Outbox, Reply
from memd.peercred import peer_of

log = logging.getLogger(__name__)
MAX_IN_FLIGHT_PER_CONNECTION = 64  # beyond this, stop reading from the client until responses drain
# Lines one connection dispatches per loop turn. A taskless read is answered at once and never counts as in
# flight, so without this one client pipelining heavy reads would hold the loop for the whole chunk it sent.
MAX_LINES_PER_TURN = MAX_IN_FLIGHT_PER_CONNECTION

# The peer of a connection not (yet) admitted; no policy ever sees it (uid -1 is no one's uid).
UNIDENTIFIED = Peer(pid=0, uid=-1, gid=-1)

Dispatch = Callable[[Peer, protocol.Request, ReplyTo | None], Coroutine[Any, Any, Any]]
Authorize = Callable[[Peer], bool]
Observe = Callable[[str, int | None, float], None]  # (method, error code or None for a result, seconds)


@dataclass(frozen=True)
class Limits:
    max_request_bytes: int
    max_connections: int
    idle_timeout: float
    request_timeout: float


class Server:
    def __init__(
        self,
        dispatch: Dispatch,
        authorize: Authorize,
        limits: Limits,
        taskless: frozenset[str] = frozenset(),
        observe: Observe | None = None,
    ) -> None:
        self.dispatch = dispatch
        self.authorize = authorize
        self.limits = limits
        self.observe = observe
        self.taskless = taskless  # methods whose handlers await nothing but futures: run without a Task
        self.connections: set[Connection] = set()
        self.generation = 0  # bumped when who may connect may have changed (a reload): peers are checked again
        self.stats = {"accepted": 0, "refused": 0, "denied": 0, "unidentified": 0, "requests": 0, "errors": 0}
        self._server: asyncio.AbstractServer | None = None
        self._sweeper: asyncio.TimerHandle | None = None

    async def start(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_unix_server(lambda: Connection(self), sock=sock, backlog=512)
        self._sweeper = loop.call_later(self._sweep_interval(), self._sweep)

    def reconfigure(self, limits: Limits) -> None:
        """A reloaded [server]: timeouts and caps apply to requests from now on, open connections included."""
        self.limits = limits

    def recheck_peers(self) -> None:
        """The policy `authorize` applies changed: every open connection's peer is checked again before its next
        request, and one no longer allowed is refused and closed."""
        self.generation += 1

    def _sweep_interval(self) -> float:
        return max(0.05, min(1.0, self.limits.request_timeout / 4, self.limits.idle_timeout / 4))

    def _sweep(self) -> None:
        """Close stalled and idle connections. One timer for the server, not one re-armed per request."""
        now = asyncio.get_running_loop().time()
        for conn in list(self.connections):
            conn.close_if_expired(now)
        self._sweeper = asyncio.get_running_loop().call_later(self._sweep_interval(), self._sweep)

    def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

    async def drain(self, timeout: float) -> None:
        """Wait (bounded) for every in-flight request to be answered, then close all connections."""
        deadline = asyncio.get_running_loop().time() + timeout
        while any(c.in_flight for c in self.connections) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        for conn in list(self.connections):
            conn.close()
        if self._server is not None:
            await self._server.wait_closed()


class Connection(asyncio.Protocol):
    def __init__(self, server: Server) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.peer = UNIDENTIFIED
        self.buffer = bytearray()
        self.outbox = Outbox()  # the answers owed, in request order (sent by the loop, or by a write's worker)
        self.generation = 0  # the server's generation this peer was last admitted under
        self.closing = True  # until connection_made admits the peer: nothing it sends is read before that
        self.last_active = 0.0
        self.partial_since = 0.0
        self._paused = False
        self._writes_blocked = False  # the client is not reading its responses
        self._processing = False
        self._continuing = False  # a loop turn is booked for lines this connection could not dispatch yet

    @property
    def in_flight(self) -> int:
        """Requests whose answers are owed (dispatched, or answered and not yet flushed)."""
        return self.outbox.owed

    # --- asyncio.Protocol -----------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the Transport interface without subclassing asyncio.Transport.
        self.transport = cast(asyncio.Transport, transport)
        server = self.server
        try:
            self.peer = peer_of(transport.get_extra_info("socket"))
        except Exception as exc:  # whatever the reason, a peer memd cannot identify is never admitted
            server.stats["unidentified"] += 1
            log.warning("refused a connection: could not read the peer's credentials: %r", exc)
            self._refuse(ACCESS_DENIED, "could not read the peer's credentials (SO_PEERCRED); refusing the connection")
            return
        if len(server.connections) >= server.limits.max_connections:
            server.stats["refused"] += 1
            self._refuse(BUSY, f"too many connections (limit {server.limits.max_connections}); retry shortly")
            return
        if not server.authorize(self.peer):
            server.stats["denied"] += 1
            log.warning("denied connection from uid %d gid %d pid %d", self.peer.uid, self.peer.gid, self.peer.pid)
            self._refuse(ACCESS_DENIED, f"uid {self.peer.uid} is not allowed to use this memd socket")
            return
        server.stats["accepted"] += 1
        self.generation = server.generation
        try:
            self.outbox.attach(transport.get_extra_info("socket").fileno())
        except (AttributeError, OSError):  # no socket to reach: this connection is answered by the loop only
            self.outbox.attach(-1)
        self.closing = False
        server.connections.add(self)
        self.last_active = asyncio.get_running_loop().time()

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self.outbox.check_unsent(self.transport)
        self.buffer += data
        self._process_buffer()

    def _process_buffer(self) -> None:
        """Dispatch the complete lines in the buffer: at most MAX_LINES_PER_TURN per loop turn, none while
        MAX_IN_FLIGHT_PER_CONNECTION are unanswered or while the client is not reading its answers. Lines that
        must wait stay in the buffer with reading paused, so a client that pipelines without reading waits
        instead of growing memd's memory or holding up other clients."""
        if self._processing:  # re-entered through an immediate answer's flush: the running loop carries on
            return
        self._processing = True
        try:
            self._process_lines()
        finally:
            self._processing = False
        self._update_reading()

    def _process_lines(self) -> None:
        buffer = self.buffer
        limit = self.server.limits.max_request_bytes
        start = 0
        budget = MAX_LINES_PER_TURN
        while budget and self.in_flight < MAX_IN_FLIGHT_PER_CONNECTION and not self._writes_blocked:
            end = buffer.find(b"\n", start)
            if end < 0:
                break
            if end - start > limit:
                self._too_large()
                return
            line = bytes(buffer[start:end])
            start = end + 1
            if line.strip():
                budget -= 1
                self._handle_line(line)
                if self.closing:
                    return
        if start:
            del buffer[:start]
        if not budget and not self._continuing and b"\n" in buffer:  # the rest on a later turn, after the others
            self._continuing = True
            asyncio.get_running_loop().call_soon(self._continue)
        lines_wait = b"\n" in buffer
        if not lines_wait and len(buffer) > limit:
            self._too_large()
            return
        now = asyncio.get_running_loop().time()
        if start:
            self.last_active = now
        if not buffer or lines_wait:  # complete lines waiting for their turn are not a stalled request
            self.partial_since = 0.0
        elif start or not self.partial_since:
            self.partial_since = now  # a new partial line began: it has request_timeout to complete

    def eof_received(self) -> bool:
        """The client shut down its sending side (`echo ... | socat`): answer what it sent, then close."""
        del self.buffer[self.buffer.rfind(b"\n") + 1 :]  # an unterminated last line is not a request
        loop = asyncio.get_running_loop()

        def close_when_answered() -> None:
            if (self.in_flight or self.buffer) and not self.closing:
                loop.call_later(0.005, close_when_answered)
            else:
                self.close()

        close_when_answered()
        return True  # keep the transport open for our answers

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.server.connections.discard(self)
        self.outbox.lost()

    def pause_writing(self) -> None:  # the client does not read its responses: stop reading its requests
        self._writes_blocked = True
        self._update_reading()

    def resume_writing(self) -> None:  # asyncio calls this once, when the buffer drained below its low mark
        self._writes_blocked = False
        self.outbox.check_unsent(self.transport)
        self._maybe_resume()

    # --- requests -------------------------------------------------------------------------------------------

    def _handle_line(self, line: bytes) -> None:
        if self.generation != self.server.generation and not self._readmit():
            return
        self.server.stats["requests"] += 1
        reply = self.outbox.add()
        try:
            request = protocol.parse_request(line)
        except protocol.ProtocolError as exc:
            self.server.stats["errors"] += 1
            reply.set(protocol.encode_error(exc.request_id, exc.code, exc.message))
            if self.server.observe is not None:
                self.server.observe("", exc.code, time.perf_counter() - reply.started)
            self._flush()
            return
        reply_to = None if request.is_notification else ReplyTo(self, reply, request.id)
        coro = self.server.dispatch(self.peer, request, reply_to)
        if request.method in self.server.taskless:
            self._step(reply, request, coro)
        else:
            task = asyncio.get_running_loop().create_task(coro)
            task.add_done_callback(lambda t: self._finish_task(reply, request, t))

    def _readmit(self) -> bool:
        """The config was reloaded since this peer was admitted: check it again, before its next request."""
        server = self.server
        if server.authorize(self.peer):
            self.generation = server.generation
            return True
        server.stats["denied"] += 1
        log.warning("uid %d is no longer allowed (config reloaded); closing its connection", self.peer.uid)
        self._refuse(
            ACCESS_DENIED, f"uid {self.peer.uid} is no longer allowed to use this memd socket (the config was reloaded)"
        )
        return False

    def _step(self, reply: Reply, request: protocol.Request, coro: Coroutine[Any, Any, Any]) -> None:
        """Run a handler without a Task: up to its next await now, the rest when the awaited future is done.
        A read answers within the loop turn that received it; a write costs no loop turns beyond the writer's."""
        try:
            awaited = coro.send(None)
        except StopIteration as stop:
            self._finish(reply, request, stop.value, None)
            return
        except (Exception, asyncio.CancelledError) as exc:
            self._finish(reply, request, None, exc)
            return
        if getattr(awaited, "_asyncio_future_blocking", False):  # what `await future` yields, as a Task sees it
            awaited._asyncio_future_blocking = False
            awaited.add_done_callback(lambda _: self._step(reply, request, coro))
        elif awaited is None:  # a bare yield (asyncio.sleep(0)): resume on the next loop turn
            asyncio.get_running_loop().call_soon(self._step, reply, request, coro)
        else:
            coro.close()
            error = RuntimeError(f"{request.method} awaited {awaited!r}, which only a Task can drive")
            self._finish(reply, request, None, error)

    def _finish_task(self, reply: Reply, request: protocol.Request, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            self._finish(reply, request, None, asyncio.CancelledError())
        else:
            exc = task.exception()
            self._finish(reply, request, None if exc is not None else task.result(), exc)

    def _finish(self, reply: Reply, request: protocol.Request, result: Any, exc: BaseException | None) -> None:
        self.outbox.claim(reply)  # from here on no worker sends this answer: the loop's and the worker's never race
        if reply.early is not None:  # a worker answered once the write was durable; this is the loop catching up
            self._finish_early(reply, request, exc)
            return
        if exc is not None and not isinstance(exc, asyncio.CancelledError):  # cancelled: the daemon is stopping
            self.server.stats["errors"] += 1
            if not isinstance(exc, MemdError):
                log.error("internal error in %s", request.method, exc_info=exc)
        if request.is_notification:  # no response, whatever happened; failures are only logged
            if isinstance(exc, MemdError):
                log.info("notification %s failed: %s", request.method, exc.message)
            reply.set(None)
        elif isinstance(exc, asyncio.CancelledError):
            reply.set(protocol.encode_error(request.id, INTERNAL_ERROR, "request cancelled"))
        elif isinstance(exc, MemdError):
            reply.set(protocol.encode_error(request.id, exc.code, exc.message, exc.data))
        elif exc is not None:
            message = f"internal error: {type(exc).__name__}: {exc} (see the daemon log)"
            reply.set(protocol.encode_error(request.id, INTERNAL_ERROR, message))
        else:
            try:
                reply.set(protocol.encode_result(request.id, result))
            except (TypeError, ValueError, UnicodeError) as err:
                log.error("result of %s not serialisable: %s", request.method, err)
                reply.set(protocol.encode_error(request.id, INTERNAL_ERROR, f"result not serialisable: {err}"))
        if self.server.observe is not None:
            code = None if exc is None else exc.code if isinstance(exc, MemdError) else INTERNAL_ERROR
            self.server.observe(request.method, code, time.perf_counter() - reply.started)
        self._flush()

    def _finish_early(self, reply: Reply, request: protocol.Request, exc: BaseException | None) -> None:
        if exc is not None and not isinstance(exc, asyncio.CancelledError):  # after a durable, answered write
            log.error("%s failed after a worker had sent its answer", request.method, exc_info=exc)
        reply.set(reply.early)
        if self.server.observe is not None:
            self.server.observe(request.method, None, reply.answered - reply.started)
        self._flush()

    # --- answers: from the loop, and from the worker that made a write durable --------------------------------

    def encode_answer(self, request_id: Any, result: Any) -> bytes:
        return protocol.encode_result(request_id, result)

    def send_early(self, slot: Any, payload: bytes) -> bool:
        """From the worker that has the answer (a durable write's, a search's query thread; memd.early_ack.Outlet):
        see Outbox.send_early."""
        return self.outbox.send_early(slot, payload, self.closing)

    def _flush(self) -> None:
        self.outbox.flush(self.transport)
        self.last_active = asyncio.get_running_loop().time()
        self._maybe_resume()

    def _maybe_resume(self) -> None:
        """After answers were sent or writing resumed: dispatch lines that had to wait, or read again."""
        if (
            b"\n" in self.buffer
            and not self._continuing
            and not self._writes_blocked
            and self.in_flight < MAX_IN_FLIGHT_PER_CONNECTION
            and not self.closing
        ):
            self._process_buffer()  # it updates reading itself (and returns at once when re-entered)
        else:
            self._update_reading()

    def _continue(self) -> None:
        self._continuing = False
        if not self.closing:
            self._process_buffer()

    def _update_reading(self) -> None:
        """Read from the client only while memd can take its requests: its answers drain, fewer than
        MAX_IN_FLIGHT_PER_CONNECTION are unanswered (reading resumes below half of that) and no complete line
        waits in the buffer."""
        transport = self.transport
        if transport is None or self.closing:
            return
        waiting = self._writes_blocked or self.in_flight >= MAX_IN_FLIGHT_PER_CONNECTION or b"\n" in self.buffer
        if waiting and not self._paused:
            self._paused = True
            transport.pause_reading()
        elif not waiting and self._paused and self.in_flight < MAX_IN_FLIGHT_PER_CONNECTION // 2:
            self._paused = False
            transport.resume_reading()

    # --- limits ---------------------------------------------------------------------------------------------

    def close_if_expired(self, now: float) -> None:
        if self.in_flight or self.closing or b"\n" in self.buffer:
            return  # the daemon owes this client answers (lines waiting count): its silence is not its fault
        limits = self.server.limits
        if self.buffer and self.partial_since:
            expired = now - self.partial_since > limits.request_timeout
        else:
            expired = now - self.last_active > limits.idle_timeout
        if expired:
            log.debug("closing connection from pid %d: %s", self.peer.pid, "stalled" if self.buffer else "idle")
            self.close()

    def _too_large(self) -> None:
        self.server.stats["errors"] += 1
        limit = self.server.limits.max_request_bytes
        self._refuse(REQUEST_TOO_LARGE, f"request line exceeds {limit} bytes (server.max_request_bytes); closing")

    def _refuse(self, code: int, message: str) -> None:
        """Answer with one error line after the responses already owed, then close."""
        self.closing = True
        self.buffer.clear()
        if self.transport is None:
            return
        loop = asyncio.get_running_loop()
        self.outbox.add().set(protocol.encode_error(None, code, message))
        self.transport.pause_reading()

        def close_when_answered() -> None:
            if not self.outbox.all_done():
                loop.call_later(0.01, close_when_answered)
                return
            self._flush()
            self.close()

        close_when_answered()

    def close(self) -> None:
        self.closing = True
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
        self.server.connections.discard(self)
