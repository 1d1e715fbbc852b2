"""Specification of the wire format's parsing and encoding (memd.protocol), without a socket."""

from __future__ import annotations

import json
from typing import Any

import pytest

from memd import protocol
from memd.errors import INVALID_REQUEST, PARSE_ERROR
from memd.protocol import ProtocolError, Request, encode_error, encode_request, encode_result, parse_request

NOT_JSON = "request is not valid JSON: "
BAD_ID = "'id' must be a string, a number or null"
BAD_NUMBER_ID = "'id' must be a string, a finite number or null"
NOT_NAN = NOT_JSON + "NaN is not JSON (RFC 8259 has no NaN or Infinity)"
NOT_INF = NOT_JSON + "Infinity is not JSON"
BATCH = "batch requests are not supported; send one request object per line"


def refused(line: bytes) -> ProtocolError:
    with pytest.raises(ProtocolError) as caught:
        parse_request(line)
    return caught.value


def test_a_request_carries_its_method_params_and_id() -> None:
    request = parse_request(b'{"jsonrpc": "2.0", "id": 7, "method": "warm.log", "params": {"workspace": "a"}}')

    assert request == Request("warm.log", {"workspace": "a"}, 7)
    assert request.is_notification is False


@pytest.mark.parametrize("request_id", ["abc", "", 0, -3, 2.5, None])
def test_any_string_number_or_null_id_is_kept_and_is_not_a_notification(request_id: Any) -> None:
    request = parse_request(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "ping"}).encode())

    assert request.id == request_id
    assert request.is_notification is False


def test_a_request_without_id_is_a_notification() -> None:
    request = parse_request(b'{"jsonrpc": "2.0", "method": "ping"}')

    assert request.is_notification is True
    assert Request("ping", {}).is_notification is True


@pytest.mark.parametrize("params", ["null", None])
def test_missing_or_null_params_are_an_empty_object(params: str | None) -> None:
    body = '{"jsonrpc": "2.0", "id": 1, "method": "ping"' + (f', "params": {params}' if params else "") + "}"

    assert parse_request(body.encode()).params == {}


@pytest.mark.parametrize(
    ("line", "code", "says"),
    [
        (b'{"jsonrpc": "2.0", "id": 1, "method": "p\xff"}', PARSE_ERROR, "request is not valid UTF-8"),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "p\xed\xa0\x80"}', PARSE_ERROR, "request is not valid UTF-8"),
        (b'{"jsonrpc": "2.0", "id": 1, "method": ', PARSE_ERROR, NOT_JSON),
        (b'{"jsonrpc": "2.0", "id": NaN, "method": "ping"}', PARSE_ERROR, NOT_NAN),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": Infinity}}', PARSE_ERROR, NOT_INF),
        (b"[" * 100_000, PARSE_ERROR, NOT_JSON),
        (b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]', INVALID_REQUEST, BATCH),
        (b'"ping"', INVALID_REQUEST, "a request must be a JSON object"),
        (b'{"jsonrpc": "2.0", "id": [1], "method": "ping"}', INVALID_REQUEST, BAD_ID),
        (b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}', INVALID_REQUEST, BAD_ID),
        (b'{"jsonrpc": "2.0", "id": true, "method": "ping"}', INVALID_REQUEST, BAD_NUMBER_ID),
        (b'{"jsonrpc": "2.0", "id": 1e999, "method": "ping"}', INVALID_REQUEST, BAD_NUMBER_ID),
    ],
    ids=["stray-byte", "encoded-surrogate", "truncated", "nan-id", "infinity", "deep", "batch", "string",
         "list-id", "object-id", "bool-id", "infinite-id"],
)  # fmt: skip
def test_a_line_that_is_not_one_valid_request_object_is_refused_without_an_id(
    line: bytes, code: int, says: str
) -> None:
    error = refused(line)

    assert error.code == code
    assert error.message.startswith(says)
    assert error.request_id is None


@pytest.mark.parametrize(
    ("obj", "says"),
    [
        ({"id": 5, "method": "ping"}, "'jsonrpc' must be \"2.0\""),
        ({"jsonrpc": "1.0", "id": 5, "method": "ping"}, "'jsonrpc' must be \"2.0\""),
        ({"jsonrpc": "2.0", "id": 5}, "'method' must be a non-empty string"),
        ({"jsonrpc": "2.0", "id": 5, "method": ""}, "'method' must be a non-empty string"),
        ({"jsonrpc": "2.0", "id": 5, "method": 3}, "'method' must be a non-empty string"),
        ({"jsonrpc": "2.0", "id": 5, "method": "\ud800"}, "'method' must be a non-empty string"),
        (
            {"jsonrpc": "2.0", "id": 5, "method": "ping", "params": [1]},
            "'params' must be an object (by-name parameters)",
        ),
        (
            {"jsonrpc": "2.0", "id": 5, "method": "ping", "params": "x"},
            "'params' must be an object (by-name parameters)",
        ),
    ],
)
def test_an_invalid_request_with_a_valid_id_is_answered_with_that_id(obj: dict[str, Any], says: str) -> None:
    error = refused(json.dumps(obj).encode())

    assert error.code == INVALID_REQUEST
    assert error.message == says
    assert error.request_id == 5


def test_an_invalid_notification_is_answered_with_a_null_id() -> None:
    error = refused(b'{"jsonrpc": "1.0", "method": "ping"}')

    assert (error.code, error.request_id) == (INVALID_REQUEST, None)


def test_a_result_is_one_compact_utf8_line() -> None:
    line = encode_result(3, {"text": "déjà vu", "n": [1, 2]})

    assert line == '{"jsonrpc":"2.0","id":3,"result":{"text":"déjà vu","n":[1,2]}}\n'.encode()


def test_an_error_carries_code_message_and_data_only_when_there_is_data() -> None:
    assert encode_error(None, -32602, "bad") == b'{"jsonrpc":"2.0","id":null,"error":{"code":-32602,"message":"bad"}}\n'
    assert json.loads(encode_error("x", -32001, "no", {"workspace": "w"}))["error"] == {
        "code": -32001,
        "message": "no",
        "data": {"workspace": "w"},
    }


def test_a_lone_surrogate_echoed_back_is_escaped_and_the_line_is_still_utf8() -> None:
    line = encode_result("\ud800", "ok")

    assert line == b'{"jsonrpc":"2.0","id":"\\ud800","result":"ok"}\n'
    line.decode("utf-8")


def test_nan_is_never_sent() -> None:
    with pytest.raises(ValueError):
        encode_result(1, float("nan"))


def test_a_request_encodes_an_id_only_when_given_one() -> None:
    assert json.loads(encode_request("ping", {})) == {"jsonrpc": "2.0", "method": "ping", "params": {}}
    assert json.loads(encode_request("ping", {"a": 1}, None)) == {
        "jsonrpc": "2.0",
        "method": "ping",
        "params": {"a": 1},
        "id": None,
    }
    assert encode_request("ping", {}, 4) == b'{"jsonrpc":"2.0","method":"ping","params":{},"id":4}\n'
    assert parse_request(encode_request("ping", {})).is_notification is True


def test_the_no_id_marker_is_no_json_value() -> None:
    assert protocol._NO_ID is not None
    assert parse_request(encode_request("ping", {}, None)).is_notification is False
