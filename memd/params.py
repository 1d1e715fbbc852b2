"""Validation of request parameters at the protocol edge, against the method's declaration (memd.declare).

`Params(raw, method)` refuses unknown parameters, so that a client's typo ("worksapce") is caught instead of
ignored; each getter returns a typed value or raises InvalidParams, with the limits the declaration gives (the same
limits the MCP schemas and the protocol doc show). A getter that does not fit the declaration is a bug in the
handler and fails loudly (AssertionError), never silently. Imports memd.declare and memd.errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memd.declare import MAX_LABEL, Kind, Method, Param
from memd.errors import InvalidParams

MAX_ITEMS = 10_000  # a list parameter without a declared limit


class Params:
    def __init__(self, raw: Mapping[str, Any], method: Method) -> None:
        allowed = method.allowed()
        unknown = sorted(set(raw) - allowed)
        if unknown:
            raise InvalidParams(
                f"unknown parameter(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}",
                data={"unknown": unknown},
            )
        self._raw = raw
        self._method = method

    def _spec(self, key: str, kind: Kind) -> Param:
        spec = self._method.param(key)
        assert spec.kind == kind, f"{self._method.name}.{key} is declared {spec.kind}, read as {kind}"
        return spec

    def text(self, key: str) -> str:
        spec = self._spec(key, "string")
        value = self._raw.get(key)
        if value is None:
            raise InvalidParams(f"missing parameter {key!r} (a string)", data={"param": key})
        return self._check_text(key, value, spec.max_len, not spec.non_empty)

    def optional_text(self, key: str) -> str | None:
        spec = self._spec(key, "string")
        value = self._raw.get(key)
        if value is None:
            return None
        return self._check_text(key, value, spec.max_len, not spec.non_empty)

    def text_list(self, key: str) -> list[str]:
        spec = self._spec(key, "strings")
        value = self._raw.get(key)
        if value is None:
            return []
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise InvalidParams(f"parameter {key!r} must be a list of strings", data={"param": key})
        max_items = spec.max_items if spec.max_items is not None else MAX_ITEMS
        if len(value) > max_items:
            raise InvalidParams(f"parameter {key!r} has more than {max_items} items", data={"param": key})
        return [self._check_text(key, v, spec.max_len, False) for v in value]

    def details(self, key: str) -> tuple[tuple[str, str], ...]:
        self._spec(key, "details")
        value = self._raw.get(key)
        if value is None:
            return ()
        if not isinstance(value, dict):
            raise InvalidParams(f"parameter {key!r} must be an object of key: value details", data={"param": key})
        out: list[tuple[str, str]] = []
        for k, v in value.items():
            self._check_text(f"{key}.{k}", k, MAX_LABEL, True)
            if isinstance(v, str):
                out.append((k, self._check_text(f"{key}.{k}", v, None, True)))
            elif v is None or isinstance(v, bool | int | float):
                # Scalars are written as their JSON text; they read back as strings (docs/format.md).
                out.append((k, "null" if v is None else str(v).lower() if isinstance(v, bool) else str(v)))
            else:
                raise InvalidParams(
                    f"detail {k!r} must be a string, number, boolean or null (got {type(v).__name__})",
                    data={"param": f"{key}.{k}"},
                )
        return tuple(out)

    def integer(self, key: str, default: int | None = None) -> int:
        """The value, or `default` (the declared default when None: a default that depends on the workspace's
        configuration is passed in)."""
        spec = self._spec(key, "integer")
        fallback = default if default is not None else spec.default
        assert isinstance(fallback, int), f"{self._method.name}.{key} has no default"
        value = self._raw.get(key, fallback)
        minimum = spec.minimum if spec.minimum is not None else -(2**63)
        maximum = spec.maximum if spec.maximum is not None else 2**63 - 1
        if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
            raise InvalidParams(
                f"parameter {key!r} must be an integer from {minimum} to {maximum}", data={"param": key}
            )
        return value

    def flag(self, key: str) -> bool:
        spec = self._spec(key, "boolean")
        value = self._raw.get(key, bool(spec.default))
        if not isinstance(value, bool):
            raise InvalidParams(f"parameter {key!r} must be true or false", data={"param": key})
        return value

    @staticmethod
    def _check_text(key: str, value: Any, max_len: int | None, allow_empty: bool) -> str:
        if not isinstance(value, str):
            raise InvalidParams(f"parameter {key!r} must be a string", data={"param": key})
        if not allow_empty and not value.strip():
            raise InvalidParams(f"parameter {key!r} must not be empty", data={"param": key})
        if max_len is not None and len(value) > max_len:
            raise InvalidParams(f"parameter {key!r} is longer than {max_len} characters", data={"param": key})
        if "\x00" in value:
            raise InvalidParams(f"parameter {key!r} contains a NUL character", data={"param": key})
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidParams(
                f"parameter {key!r} contains a lone surrogate (\\ud800-\\udfff), which is not text", data={"param": key}
            ) from None
        return value
