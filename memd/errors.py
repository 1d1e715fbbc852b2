"""The one error hierarchy of memd.

Every error a client can see carries a stable numeric code (documented in docs/protocol.md) and a message that
says what to do. Core code raises these; the server maps them to JSON-RPC errors; only the CLI picks exit codes.
Imports nothing from memd.
"""

from __future__ import annotations

from typing import Any

# JSON-RPC 2.0 standard codes.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

# memd's own codes (stable; part of the public API).
UNKNOWN_WORKSPACE = -32001
ACCESS_DENIED = -32002
REQUEST_TOO_LARGE = -32003
BUSY = -32004
STORAGE_ERROR = -32005
CORRUPT_FILE = -32006
SHUTTING_DOWN = -32007
CONFIG_INVALID = -32008
NOT_FOUND = -32009
UNAVAILABLE = -32010
CHECKPOINT_FAILED = -32011


class MemdError(Exception):
    """Base class: a failure a caller can act on. `code` is stable, `data` is optional structured detail."""

    code: int = INTERNAL_ERROR

    def __init__(self, message: str, *, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data


class InvalidParams(MemdError):
    code = INVALID_PARAMS


class MethodNotFound(MemdError):
    code = METHOD_NOT_FOUND


class UnknownWorkspace(MemdError):
    code = UNKNOWN_WORKSPACE


class AccessDenied(MemdError):
    code = ACCESS_DENIED


class RequestTooLarge(MemdError):
    code = REQUEST_TOO_LARGE


class Busy(MemdError):
    code = BUSY


class StorageError(MemdError):
    """A write could not be made durable (EIO, ENOSPC, ...). Nothing was acknowledged."""

    code = STORAGE_ERROR


class CorruptFile(MemdError):
    """A tier file on disk cannot be parsed; memd serves the last good state and refuses writes to it."""

    code = CORRUPT_FILE


class ShuttingDown(MemdError):
    code = SHUTTING_DOWN


class ConfigError(MemdError):
    """The configuration is invalid. `errors` lists every problem, each naming the full key path."""

    code = CONFIG_INVALID

    def __init__(self, errors: list[str]) -> None:
        super().__init__("invalid configuration:\n  " + "\n  ".join(errors), data={"errors": errors})
        self.errors = errors


class NotFound(MemdError):
    code = NOT_FOUND


class Unavailable(MemdError):
    """A dependency memd needs for this request is missing or disabled (e.g. token data, git)."""

    code = UNAVAILABLE


class CheckpointFailed(MemdError):
    """A checkpoint was not applied; nothing changed. The message says why."""

    code = CHECKPOINT_FAILED


class StartupError(MemdError):
    """memd cannot start (or cannot apply a reload); the message says what to fix."""
