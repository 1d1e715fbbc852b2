"""The wire format: JSON-RPC 2.0, one UTF-8 JSON object per `\\n`-terminated line, over a SOCK_STREAM Unix socket.

    -> {"jsonrpc": "2.0", "id": 1, "method": "warm.log", "params": {"workspace": "default", "action": "x"}}
    <- {"jsonrpc": "2.0", "id": 1, "result": {...}}
    <- {"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "...", "data": {...}}}

Requests may be pipelined; responses come back in request order. A request without "id" is a notification
and gets no response. Batch arrays are rejected (-32600) so that each line maps to at most one response.
A line longer than `server.max_request_bytes` is answered with -32003 and the connection is closed.
The full specification is docs/protocol.md. Imports only memd.errors.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from memd.errors import INVALID_REQUEST, PARSE_ERROR, MemdError

_NO_ID = object()


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    params: dict[str, Any]
    id: Any = _NO_ID

    @property
    def is_notification(self) -> bool:
        return self.id is _NO_ID


class ProtocolError(MemdError):
    """A line that is not a valid request; answered with id null (or the request's id when it had one)."""

    def __init__(self, code: int, message: str, request_id: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.request_id = request_id


def parse_request(line: bytes) -> Request:
    try:
        # Strict UTF-8 first: json.loads would guess UTF-16/32 from raw bytes and accept encoded surrogates.
        obj = _DECODER.decode(line.decode("utf-8"))
    except UnicodeDecodeError:
        raise ProtocolError(PARSE_ERROR, "request is not valid UTF-8") from None
    except (json.JSONDecodeError, RecursionError, ValueError) as exc:
        raise ProtocolError(PARSE_ERROR, f"request is not valid JSON: {exc}") from None
    if isinstance(obj, list):
        raise ProtocolError(INVALID_REQUEST, "batch requests are not supported; send one request object per line")
    if not isinstance(obj, dict):
        raise ProtocolError(INVALID_REQUEST, "a request must be a JSON object")
    request_id = obj.get("id", _NO_ID)
    reply_id = None if request_id is _NO_ID else request_id
    if request_id is not _NO_ID and not (request_id is None or isinstance(request_id, str | int | float)):
        raise ProtocolError(INVALID_REQUEST, "'id' must be a string, a number or null")
    if isinstance(request_id, bool) or (isinstance(request_id, float) and not math.isfinite(request_id)):
        raise ProtocolError(INVALID_REQUEST, "'id' must be a string, a finite number or null")
    if obj.get("jsonrpc") != "2.0":
        raise ProtocolError(INVALID_REQUEST, "'jsonrpc' must be \"2.0\"", reply_id)
    method = obj.get("method")
    if not isinstance(method, str) or not method or not _is_text(method):
        raise ProtocolError(INVALID_REQUEST, "'method' must be a non-empty string", reply_id)
    params = obj.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise ProtocolError(INVALID_REQUEST, "'params' must be an object (by-name parameters)", reply_id)
    return Request(method, params, request_id)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (RFC 8259 has no NaN or Infinity)")


# Built once: json.loads/json.dumps with any option build a new decoder/encoder per call (LIMITS.md: per-request
# Python overhead is what separates memd from the disk).
_DECODER = json.JSONDecoder(parse_constant=_no_constant)
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_ASCII_ENCODER = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=False)


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def encode_result(request_id: Any, result: Any) -> bytes:
    return _dumps({"jsonrpc": "2.0", "id": request_id, "result": result})


def encode_error(request_id: Any, code: int, message: str, data: Any = None) -> bytes:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return _dumps({"jsonrpc": "2.0", "id": request_id, "error": error})


def encode_request(method: str, params: dict[str, Any], request_id: Any = _NO_ID) -> bytes:
    obj: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if request_id is not _NO_ID:
        obj["id"] = request_id
    return _dumps(obj)


def _dumps(obj: Any) -> bytes:
    text = _ENCODER.encode(obj)
    try:
        return (text + "\n").encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate echoed back (say, in an id): escape it, JSON allows that
        return (_ASCII_ENCODER.encode(obj) + "\n").encode("ascii")
