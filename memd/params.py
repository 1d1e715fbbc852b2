"""Validation of request parameters at the protocol edge: each getter returns a typed value or raises InvalidParams.

Unknown parameters are errors too, so that a client's typo ("worksapce") is caught instead of ignored.
Imports only memd.errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memd.errors import InvalidParams

MAX_LABEL = 512  # actions, categories, keys: one line in a heading or list item


class Params:
    def __init__(self, raw: Mapping[str, Any], allowed: frozenset[str]) -> None:
        unknown = sorted(set(raw) - allowed)
        if unknown:
            raise InvalidParams(
                f"unknown parameter(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}",
                data={"unknown": unknown},
            )
        self._raw = raw

    def text(self, key: str, *, max_len: int | None = None, allow_empty: bool = False) -> str:
        value = self._raw.get(key)
        if value is None:
            raise InvalidParams(f"missing parameter {key!r} (a string)", data={"param": key})
        return self._check_text(key, value, max_len, allow_empty)

    def optional_text(self, key: str, *, max_len: int | None = None, allow_empty: bool = True) -> str | None:
        value = self._raw.get(key)
        if value is None:
            return None
        return self._check_text(key, value, max_len, allow_empty)

    def text_list(self, key: str, *, max_len: int | None = None, max_items: int = 10_000) -> list[str]:
        value = self._raw.get(key)
        if value is None:
            return []
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise InvalidParams(f"parameter {key!r} must be a list of strings", data={"param": key})
        if len(value) > max_items:
            raise InvalidParams(f"parameter {key!r} has more than {max_items} items", data={"param": key})
        return [self._check_text(key, v, max_len, False) for v in value]

    def details(self, key: str) -> tuple[tuple[str, str], ...]:
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

    def integer(self, key: str, default: int, *, minimum: int, maximum: int) -> int:
        value = self._raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
            raise InvalidParams(
                f"parameter {key!r} must be an integer from {minimum} to {maximum}", data={"param": key}
            )
        return value

    def flag(self, key: str, default: bool = False) -> bool:
        value = self._raw.get(key, default)
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
