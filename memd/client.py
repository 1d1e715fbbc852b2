"""A synchronous client for memd's socket protocol (what the CLI and Python agents use).

    with Client(find_socket(os.environ)) as memd:  # the socket `memd` uses: $MEMD_SOCKET, the config's, the default
        memd.call("warm.log", workspace="default", action="ran tests", result="ok")

Errors come back as MemdError subclasses carrying the daemon's stable code. Imports memd.protocol, memd.locate
(to find the socket as the CLI does, without loading the daemon's configuration) and memd.errors.
"""

from __future__ import annotations

import itertools
import json
import socket
from pathlib import Path
from types import TracebackType
from typing import Any

from memd import errors
from memd.errors import MemdError
from memd.locate import find_socket as find_socket  # re-exported: clients find the socket here
from memd.protocol import encode_request

_BY_CODE: dict[int, type[MemdError]] = {
    cls.code: cls
    for cls in (
        errors.InvalidParams,
        errors.MethodNotFound,
        errors.UnknownWorkspace,
        errors.AccessDenied,
        errors.RequestTooLarge,
        errors.Busy,
        errors.StorageError,
        errors.CorruptFile,
        errors.ShuttingDown,
        errors.NotFound,
        errors.Unavailable,
        errors.CheckpointFailed,
    )
}


class DaemonNotRunning(MemdError):
    code = errors.UNAVAILABLE


class RemoteError(MemdError):
    """An error code this client does not know (a newer daemon, or a standard JSON-RPC code)."""

    def __init__(self, code: int, message: str, data: dict[str, Any] | None) -> None:
        super().__init__(message, data=data)
        self.code = code


def connect_error(path: Path, exc: OSError) -> Exception:
    """What a failed connect() to memd's socket means to the caller (the OSError itself when nothing better)."""
    if isinstance(exc, FileNotFoundError | ConnectionRefusedError):
        return DaemonNotRunning(
            f"memd is not running: nothing listens on {path} ({exc.strerror}). Start it with "
            "`memd run` (or `systemctl --user start memd`), or point --socket / MEMD_SOCKET at its socket",
            data={"socket": str(path)},
        )
    if isinstance(exc, PermissionError):
        return errors.AccessDenied(f"no permission to connect to {path}")
    return exc


def error_from(code: int, message: str, data: dict[str, Any] | None) -> MemdError:
    cls = _BY_CODE.get(code)
    if cls is None or cls is errors.ConfigError:
        return RemoteError(code, message, data)
    return cls(message, data=data)


class Client:
    def __init__(self, path: Path, timeout: float = 30.0) -> None:
        self.path = path
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._buffer = b""
        self._ids = itertools.count(1)

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _connect(self) -> socket.socket:
        if self._sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            try:
                sock.connect(str(self.path))
            except OSError as exc:
                sock.close()
                raise connect_error(self.path, exc) from None
            self._sock = sock
        return self._sock

    def call(self, method: str, **params: Any) -> Any:
        """Send one request and return its result (raises MemdError on an error response)."""
        request_id = next(self._ids)
        sock = self._connect()
        try:
            sock.sendall(encode_request(method, params, request_id))
        except (BrokenPipeError, ConnectionResetError):
            # memd may have refused the connection (access, capacity) and hung up: its reason is waiting here.
            response = self._read_response()
            err = response.get("error") or {}
            raise error_from(int(err.get("code", 0)), str(err.get("message", "")), err.get("data")) from None
        response = self._read_response()
        while response.get("id") != request_id and response.get("id") is not None:
            response = self._read_response()  # the late answer to an earlier call that timed out
        if "error" in response:
            err = response["error"]
            raise error_from(int(err.get("code", 0)), str(err.get("message", "")), err.get("data"))
        return response.get("result")

    def notify(self, method: str, **params: Any) -> None:
        """Send a notification (no response; nothing tells whether it succeeded)."""
        self._connect().sendall(encode_request(method, params))

    def _read_response(self) -> dict[str, Any]:
        assert self._sock is not None
        while b"\n" not in self._buffer:
            try:
                chunk = self._sock.recv(65536)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                self.close()
                raise errors.Unavailable("memd closed the connection before answering (see its log)")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        obj = json.loads(line)
        if not isinstance(obj, dict):
            raise errors.Unavailable("memd sent a response that is not a JSON object")
        return obj
