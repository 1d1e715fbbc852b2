"""An asyncio client for memd's socket protocol, for agents that run on an event loop.

    async with AsyncClient(path) as memd:
        await memd.call("warm.log", workspace="default", action="ran tests", result="ok")
        notes, entry = await asyncio.gather(memd.call("hot.get", workspace="default"), memd.call(...))

One connection serves any number of concurrent calls: requests are pipelined, and one reader task hands each
answer to the call with its id, so calling from many tasks costs no extra connections (memd answers in order and
lets their writes share one group commit). Errors are the same MemdError subclasses as the synchronous
`memd.client.Client` raises. Imports memd.client, memd.protocol and memd.errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import socket
from pathlib import Path
from types import TracebackType
from typing import Any

from memd import errors
from memd.client import connect_error, error_from
from memd.errors import MemdError
from memd.protocol import encode_request

LINE_LIMIT = 64 << 20  # an answer may be large (status at thousands of workspaces, context payloads)


class AsyncClient:
    def __init__(self, path: Path, timeout: float = 30.0) -> None:
        self.path = path
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._ids = itertools.count(1)
        self._reading: asyncio.Task[None] | None = None
        self._connecting = asyncio.Lock()
        self._sending = asyncio.Lock()  # one request's bytes at a time: concurrent sends must not interleave

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        reading = self._reading
        self._drop_connection(errors.Unavailable("the client was closed before memd answered"))
        if reading is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await reading

    async def call(self, method: str, **params: Any) -> Any:
        """Send one request and return its result (raises MemdError on an error response)."""
        request_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(self.timeout):
                sock = await self._connect()
                self._pending[request_id] = future
                await self._send(sock, encode_request(method, params, request_id))
                return await future
        except TimeoutError:
            raise errors.Unavailable(f"memd did not answer {method} within {self.timeout} s") from None
        finally:
            self._pending.pop(request_id, None)

    async def notify(self, method: str, **params: Any) -> None:
        """Send a notification (no response; nothing tells whether it succeeded)."""
        async with asyncio.timeout(self.timeout):
            await self._send(await self._connect(), encode_request(method, params))

    async def _send(self, sock: socket.socket, data: bytes) -> None:
        # A send that fails because memd refused the connection (access, capacity) and hung up is not the end:
        # its reason is still in the socket buffer, and the reader hands it to every pending call. Plain sockets,
        # not a transport, so that a failed send does not throw that answer away.
        async with self._sending:
            try:
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    await asyncio.get_running_loop().sock_sendall(sock, data)
            except OSError as exc:  # the connection was dropped under this call (closed, or memd went away)
                raise errors.Unavailable(f"sending to memd failed: {exc}; call again to reconnect") from None
            except BaseException:
                # Cancelled or timed out part-way through a line: the next request would be glued onto that half
                # line, so this connection is done. Its pending calls fail now; the next call connects again.
                if self._sock is sock:
                    self._drop_connection(errors.Unavailable("a request was cut off while being sent; reconnect"))
                raise

    async def _connect(self) -> socket.socket:
        async with self._connecting:
            if self._sock is not None:
                return self._sock
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                await asyncio.get_running_loop().sock_connect(sock, str(self.path))
            except OSError as exc:
                sock.close()
                raise connect_error(self.path, exc) from None
            except BaseException:
                sock.close()
                raise
            self._sock = sock
            self._reading = asyncio.get_running_loop().create_task(self._read_answers(sock))
            return sock

    async def _read_answers(self, sock: socket.socket) -> None:
        reason: MemdError = errors.Unavailable("memd closed the connection before answering (see its log)")
        try:
            reason = await self._read_until_closed(sock, reason)
        except Exception as exc:  # never leave a connection without its reader: every call on it would time out
            reason = errors.Unavailable(f"reading memd's answers failed: {type(exc).__name__}: {exc}")
        finally:
            if self._sock is sock:
                self._drop_connection(reason)

    async def _read_until_closed(self, sock: socket.socket, reason: MemdError) -> MemdError:
        loop = asyncio.get_running_loop()
        buffer = bytearray()
        while True:
            try:
                chunk = await loop.sock_recv(sock, 1 << 16)
            except (ConnectionResetError, BrokenPipeError):
                chunk = b""
            except OSError as exc:
                reason = errors.Unavailable(f"reading memd's answers failed: {exc}")
                break
            if not chunk:
                break
            buffer += chunk
            if len(buffer) > LINE_LIMIT and b"\n" not in buffer:
                reason = errors.Unavailable(f"memd sent an answer longer than {LINE_LIMIT} bytes")
                break
            *lines, rest = buffer.split(b"\n")
            buffer = bytearray(rest)
            for line in lines:
                refusal = self._answer(line)
                if refusal is not None:
                    reason = refusal
        return reason

    def _answer(self, line: bytes | bytearray) -> MemdError | None:
        """Hand one answer line to its call. Returns the error of a line that answers no call (a refusal)."""
        try:
            obj = json.loads(line)
        except ValueError:
            return errors.Unavailable(f"memd sent a line that is not JSON: {line[:200]!r}")
        if not isinstance(obj, dict):
            return errors.Unavailable("memd sent a response that is not a JSON object")
        error = obj.get("error")
        rid = obj.get("id")
        future = self._pending.get(rid) if isinstance(rid, int) else None
        if future is None or future.done():
            if rid is None and isinstance(error, dict):  # refused as a whole: every pending call gets the reason
                return error_from(int(error.get("code", 0)), str(error.get("message", "")), error.get("data"))
            return None  # the late answer to a call that timed out
        if isinstance(error, dict):
            future.set_exception(
                error_from(int(error.get("code", 0)), str(error.get("message", "")), error.get("data"))
            )
        else:
            future.set_result(obj.get("result"))
        return None

    def _drop_connection(self, reason: MemdError) -> None:
        """Forget the connection (the next call connects again) and fail what it still owed."""
        sock, self._sock = self._sock, None
        reading, self._reading = self._reading, None
        if reading is not None and reading is not asyncio.current_task():
            reading.cancel()
        if sock is not None:
            # The loop still watches this fd for a pending recv (or a cut-off send); the next connection may get
            # the same fd number, so stop watching it now, not when those cancelled futures get round to it.
            loop = asyncio.get_running_loop()
            loop.remove_reader(sock.fileno())
            loop.remove_writer(sock.fileno())
            sock.close()
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(reason)
