"""A small OpenAI-compatible HTTP server for tests: the real `openai` client talks to it over loopback.

    with FakeLLM() as llm:
        llm.script(Status(429, headers={"Retry-After": "1"}), Reply("# Context Summary\\n- done"))
        client = openai.AsyncOpenAI(base_url=llm.url, api_key="test", max_retries=1)
        ...
        assert len(llm.requests) == 2

Only `POST /v1/chat/completions` is served (anything else is 404 and consumes no behaviour). Each request takes
the next behaviour queued with `script()`; when the queue is empty it gets `default` (a short Reply). Behaviours:

- `Reply(content, prompt_tokens=None, completion_tokens=None, headers={}, finish_reason="stop", usage=True)`: a
  valid `chat.completion` with id, model (the request's), `choices[0].message.content`, usage (estimated at ~4
  characters a token when a count is None; no `usage` member at all with `usage=False`, as some local servers
  answer), `finish_reason` (e.g. "length" for a reply cut at `max_tokens`) and an `x-request-id` header
  ("req_fake_<n>").
- `Empty()`: the same with content "".
- `Echo(transform)`: a Reply whose content is `transform(messages)`, computed from the request's messages
  (default: the last message's content).
- `Compute(respond)`: behaves as `respond(body)` (a `Reply`), computed from the whole parsed request body
  (messages, `max_tokens`...), e.g. a summary built from the request's own text.
- `Status(code, body=None, headers={})`: that status with an OpenAI-style error body (or `body`: a dict is sent
  as JSON, a str as is), e.g. `Status(500)`, `Status(429, headers={"Retry-After": "1"})`.
- `Malformed()`: 200, `Content-Type: application/json`, a body that is not JSON.
- `Hang()`: accepts the request and never answers until `stop()`, which it does not delay.
- `Delay(seconds, then=Reply(...))`: waits (interruptibly: `stop()` ends the wait), then behaves as `then`.

`requests` records every request received, in order: `{"path", "headers", "body" (parsed JSON or None),
"raw" (the body as text), "received_at" (time.monotonic())}`. `raw` is what a test greps to prove a string
never reached the wire.

The server is a ThreadingHTTPServer on 127.0.0.1, port 0, with daemon threads. `stop()` shuts down the listener
and every open connection (keep-alive or hanging), so neither the server nor the client leaks a socket.
Stdlib only.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, TypeAlias

CHAT_PATH = "/v1/chat/completions"


@dataclass(frozen=True)
class Reply:
    content: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    finish_reason: str = "stop"
    usage: bool = True  # False: the response carries no `usage` member


@dataclass(frozen=True)
class Empty:
    prompt_tokens: int | None = None


def _last_content(messages: list[dict[str, Any]]) -> str:
    return str(messages[-1].get("content", "")) if messages else ""


@dataclass(frozen=True)
class Echo:
    transform: Callable[[list[dict[str, Any]]], str] = _last_content


@dataclass(frozen=True)
class Compute:
    respond: Callable[[dict[str, Any]], Reply]


@dataclass(frozen=True)
class Status:
    code: int
    body: dict[str, Any] | str | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Malformed:
    body: str = '{"id": "chatcmpl-broken", "object": "chat.completion", "choices": [{"message": '


@dataclass(frozen=True)
class Hang:
    pass


@dataclass(frozen=True)
class Delay:
    seconds: float
    then: Behaviour = field(default_factory=lambda: Reply("delayed"))


Behaviour: TypeAlias = "Reply | Empty | Echo | Compute | Status | Malformed | Hang | Delay"


def closed_port_url() -> str:
    """A base URL on 127.0.0.1 where nothing listens: connecting is refused at once."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def _estimate_tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4)


def _error_body(code: int) -> dict[str, Any]:
    kinds = {
        400: "invalid_request_error",
        401: "authentication_error",
        404: "not_found_error",
        429: "rate_limit_exceeded",
    }
    kind = kinds.get(code, "server_error")
    return {"error": {"message": f"fake LLM answered HTTP {code}", "type": kind, "param": None, "code": kind}}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, llm: FakeLLM) -> None:
        self.llm = llm
        super().__init__(("127.0.0.1", 0), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gives up (timeout, closed pool) resets the connection mid-reply; that is expected here.
        pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.server.llm._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.llm._track(self.connection, add=False)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._record(b"")
        self._send(404, json.dumps(_error_body(404)).encode())

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = self._record(raw)
        if self.path.split("?", 1)[0] != CHAT_PATH:
            self._send(404, json.dumps(_error_body(404)).encode())
            return
        self._perform(self.server.llm._next(), body if isinstance(body, dict) else {})

    def _record(self, raw: bytes) -> Any:
        text = raw.decode("utf-8", errors="replace")
        try:
            body = json.loads(text) if text else None
        except ValueError:
            body = None
        self.server.llm._append(
            {
                "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": body,
                "raw": text,
                "received_at": time.monotonic(),
            }
        )
        return body

    def _perform(self, behaviour: Behaviour, request: dict[str, Any]) -> None:
        llm = self.server.llm
        if isinstance(behaviour, Delay):
            if llm._stopping.wait(behaviour.seconds):
                return
            self._perform(behaviour.then, request)
        elif isinstance(behaviour, Hang):
            llm._stopping.wait()
            self.close_connection = True
        elif isinstance(behaviour, Status):
            body = behaviour.body if behaviour.body is not None else _error_body(behaviour.code)
            payload = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self._send(behaviour.code, payload, behaviour.headers)
        elif isinstance(behaviour, Malformed):
            self._send(200, behaviour.body.encode())
        elif isinstance(behaviour, Empty):
            self._complete(request, "", behaviour.prompt_tokens, 0, {})
        elif isinstance(behaviour, Echo):
            messages = request.get("messages") or []
            self._complete(request, behaviour.transform(list(messages)), None, None, {})
        elif isinstance(behaviour, Compute):
            self._perform(behaviour.respond(request), request)
        else:
            self._complete(
                request,
                behaviour.content,
                behaviour.prompt_tokens,
                behaviour.completion_tokens,
                behaviour.headers,
                behaviour.finish_reason,
                behaviour.usage,
            )

    def _complete(
        self,
        request: dict[str, Any],
        content: str,
        prompt_tokens: int | None,
        completion_tokens: int | None,
        headers: dict[str, str],
        finish_reason: str = "stop",
        include_usage: bool = True,
    ) -> None:
        n = self.server.llm._serial()
        prompt = "".join(str(m.get("content", "")) for m in request.get("messages") or [])
        prompt_n = prompt_tokens if prompt_tokens is not None else _estimate_tokens(prompt)
        if completion_tokens is None:
            completion_tokens = _estimate_tokens(content) if content else 0
        reply: dict[str, Any] = {
            "id": f"chatcmpl-fake{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": str(request.get("model") or "fake-model"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content, "refusal": None},
                    "logprobs": None,
                    "finish_reason": finish_reason,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_n,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_n + completion_tokens,
            },
        }
        if not include_usage:
            del reply["usage"]
        self._send(200, json.dumps(reply).encode(), {"x-request-id": f"req_fake_{n}", **headers})

    def _send(self, code: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
            self.wfile.flush()
        except OSError:
            self.close_connection = True


class FakeLLM:
    """An OpenAI-compatible endpoint on 127.0.0.1 whose answers a test scripts (see the module docstring)."""

    def __init__(self) -> None:
        self.url = ""
        self.requests: list[dict[str, Any]] = []
        self.default: Behaviour = Reply("# Context Summary\n- fake summary")
        self._queue: deque[Behaviour] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._counter = itertools.count(1)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> FakeLLM:
        if self._server is not None:
            return self
        self._stopping.clear()
        self._server = _Server(self)
        port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{port}/v1"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fakellm", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, thread = self._server, self._thread
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.server_close()
        with self._lock:
            open_connections = list(self._connections)
        for conn in open_connections:
            # Wakes handler threads blocked reading a keep-alive connection; they close their socket themselves.
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if thread is not None:
            thread.join(timeout=5)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with self._lock:
                if not self._connections:
                    break
            time.sleep(0.01)
        self._server = None
        self._thread = None

    def __enter__(self) -> FakeLLM:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def script(self, *behaviours: Behaviour) -> None:
        """Queue behaviours for the next chat requests, in order; after them, `default` answers."""
        with self._lock:
            self._queue.extend(behaviours)

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        """The recorded requests to the chat completions path."""
        with self._lock:
            return [r for r in self.requests if r["path"].split("?", 1)[0] == CHAT_PATH]

    def _next(self) -> Behaviour:
        with self._lock:
            return self._queue.popleft() if self._queue else self.default

    def _append(self, record: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(record)

    def _serial(self) -> int:
        with self._lock:
            return next(self._counter)

    def _track(self, conn: socket.socket, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)
