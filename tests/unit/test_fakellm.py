"""Specification of the fake OpenAI-compatible endpoint (tests/fakellm.py), driven by the real `openai` client:
what each scripted behaviour looks like from the client's side, which exception the client raises for each
failure, and that nothing (server thread, socket, client) outlives a test."""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import openai
import pytest
from fakellm import Delay, Echo, Empty, FakeLLM, Hang, Malformed, Reply, Status, closed_port_url

MESSAGES = [
    {"role": "system", "content": "You compress notes."},
    {"role": "user", "content": "decided to retry with backoff"},
]


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


def chat(url: str, *, max_retries: int = 0, timeout: float = 5.0, messages: list[dict[str, str]] = MESSAGES) -> Any:
    """One chat completion through the real client, closed afterwards so no socket leaks."""

    async def go() -> Any:
        async with openai.AsyncOpenAI(base_url=url, api_key="test", max_retries=max_retries, timeout=timeout) as c:
            return await c.chat.completions.create(model="fake-summarizer", messages=messages)  # type: ignore[arg-type]

    return asyncio.run(go())


# --- answers -------------------------------------------------------------------------------------------------


def test_a_reply_is_parsed_with_its_usage_and_request_id(llm: FakeLLM) -> None:
    llm.script(Reply("# Context Summary\n- retry with backoff", prompt_tokens=120, completion_tokens=9))
    response = chat(llm.url)
    assert response.object == "chat.completion"
    assert response.id.startswith("chatcmpl-")
    assert response.model == "fake-summarizer"
    assert response.choices[0].message.content == "# Context Summary\n- retry with backoff"
    assert response.choices[0].finish_reason == "stop"
    assert (response.usage.prompt_tokens, response.usage.completion_tokens, response.usage.total_tokens) == (
        120,
        9,
        129,
    )
    assert response._request_id.startswith("req_fake_")


def test_every_request_is_recorded_with_its_path_headers_and_body(llm: FakeLLM) -> None:
    chat(llm.url)
    [request] = llm.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["authorization"] == "Bearer test"
    assert request["body"]["model"] == "fake-summarizer"
    assert request["body"]["messages"] == MESSAGES
    assert "decided to retry with backoff" in request["raw"]


def test_usage_is_estimated_when_the_reply_does_not_give_it(llm: FakeLLM) -> None:
    llm.script(Reply("- short"))
    usage = chat(llm.url).usage
    assert usage.prompt_tokens > 0
    assert usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_scripted_behaviours_answer_in_order_then_the_default(llm: FakeLLM) -> None:
    llm.script(Reply("first"), Reply("second"))
    llm.default = Reply("default")
    assert [chat(llm.url).choices[0].message.content for _ in range(4)] == ["first", "second", "default", "default"]


def test_an_empty_completion_has_empty_content(llm: FakeLLM) -> None:
    llm.script(Empty())
    response = chat(llm.url)
    assert response.choices[0].message.content == ""
    assert response.usage.completion_tokens == 0


def test_echo_builds_the_reply_from_the_request_messages(llm: FakeLLM) -> None:
    llm.script(Echo(lambda messages: "# Context Summary\n- " + messages[-1]["content"].upper()))
    assert chat(llm.url).choices[0].message.content == "# Context Summary\n- DECIDED TO RETRY WITH BACKOFF"


def test_echo_by_default_returns_the_last_message(llm: FakeLLM) -> None:
    llm.script(Echo())
    assert chat(llm.url).choices[0].message.content == "decided to retry with backoff"


def test_delay_answers_after_waiting(llm: FakeLLM) -> None:
    llm.script(Delay(0.3, then=Reply("late")))
    started = time.monotonic()
    assert chat(llm.url).choices[0].message.content == "late"
    assert time.monotonic() - started >= 0.3


# --- failures, as the client reports them --------------------------------------------------------------------


def test_a_500_raises_internal_server_error(llm: FakeLLM) -> None:
    llm.script(Status(500))
    with pytest.raises(openai.InternalServerError) as caught:
        chat(llm.url)
    assert caught.value.status_code == 500
    assert caught.value.code == "server_error"
    assert len(llm.requests) == 1


def test_a_status_carries_its_own_body_and_headers(llm: FakeLLM) -> None:
    llm.script(Status(503, body="upstream overloaded", headers={"x-request-id": "req_overloaded"}))
    with pytest.raises(openai.InternalServerError) as caught:
        chat(llm.url)
    assert caught.value.status_code == 503
    assert caught.value.request_id == "req_overloaded"
    assert caught.value.body == "upstream overloaded"


def test_a_429_raises_rate_limit_error_when_retries_are_off(llm: FakeLLM) -> None:
    llm.script(Status(429, headers={"Retry-After": "1"}), Reply("never asked for"))
    with pytest.raises(openai.RateLimitError) as caught:
        chat(llm.url, max_retries=0)
    assert caught.value.status_code == 429
    assert len(llm.requests) == 1


def test_a_429_is_retried_after_its_retry_after_and_the_next_reply_succeeds(llm: FakeLLM) -> None:
    llm.script(Status(429, headers={"Retry-After": "1"}), Reply("after the rate limit"))
    response = chat(llm.url, max_retries=1)
    assert response.choices[0].message.content == "after the rate limit"
    first, second = llm.requests
    assert second["received_at"] - first["received_at"] >= 0.9  # Retry-After: 1, not the 0.5 s default backoff
    assert second["headers"]["x-stainless-retry-count"] == "1"


def test_a_hang_raises_api_timeout_error(llm: FakeLLM) -> None:
    llm.script(Hang())
    with pytest.raises(openai.APITimeoutError):
        chat(llm.url, timeout=0.5)


def test_a_delay_longer_than_the_timeout_raises_api_timeout_error(llm: FakeLLM) -> None:
    llm.script(Delay(3, then=Reply("too late")))
    with pytest.raises(openai.APITimeoutError):
        chat(llm.url, timeout=0.5)


def test_a_malformed_body_escapes_the_client_as_a_json_decode_error(llm: FakeLLM) -> None:
    # The openai client does not wrap this one: a 200 with Content-Type application/json whose body is not JSON
    # raises json.JSONDecodeError (a ValueError), not an openai.OpenAIError, and is not retried.
    llm.script(Malformed())
    with pytest.raises(json.JSONDecodeError) as caught:
        chat(llm.url, max_retries=2)
    assert not isinstance(caught.value, openai.OpenAIError)
    assert len(llm.requests) == 1


def test_a_closed_port_raises_api_connection_error() -> None:
    with pytest.raises(openai.APIConnectionError) as caught:
        chat(closed_port_url())
    assert type(caught.value) is openai.APIConnectionError  # refused at once: not a timeout


# --- the server itself ---------------------------------------------------------------------------------------


def _post(url: str, path: str, body: bytes = b"{}") -> int:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=5)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def test_only_chat_completions_is_served_and_other_paths_consume_no_behaviour(llm: FakeLLM) -> None:
    llm.script(Reply("scripted"))
    assert _post(llm.url, "/v1/embeddings") == 404
    assert _post(llm.url, "/v1/completions") == 404
    assert chat(llm.url).choices[0].message.content == "scripted"
    assert [r["path"] for r in llm.requests] == ["/v1/embeddings", "/v1/completions", "/v1/chat/completions"]
    assert len(llm.chat_requests) == 1


def test_stop_does_not_wait_for_a_hanging_request() -> None:
    server = FakeLLM().start()
    server.script(Hang())
    outcome: list[BaseException | int] = []

    def client() -> None:
        try:
            outcome.append(_post(server.url, "/v1/chat/completions", json.dumps({"messages": MESSAGES}).encode()))
        except (OSError, http.client.HTTPException) as exc:
            outcome.append(exc)

    caller = threading.Thread(target=client)
    caller.start()
    while not server.requests:
        time.sleep(0.01)
    stopper = threading.Thread(target=server.stop)
    stopper.start()
    stopper.join(timeout=10)
    caller.join(timeout=10)
    assert not stopper.is_alive()
    assert not caller.is_alive()
    assert outcome and not isinstance(outcome[0], int)  # the hanging request was dropped, never answered


def test_a_stopped_server_can_be_started_again_on_a_new_port() -> None:
    server = FakeLLM()
    with server:
        first = server.url
        assert chat(first).choices
    with server:
        assert chat(server.url).choices
    assert len(server.requests) == 2


def test_closed_port_url_is_on_loopback() -> None:
    parts = urlsplit(closed_port_url())
    assert (parts.scheme, parts.hostname, parts.path) == ("http", "127.0.0.1", "/v1")
    assert parts.port
