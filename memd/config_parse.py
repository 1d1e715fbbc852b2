"""The converter between parsed TOML and the frozen config dataclasses, driven by the classes' type hints.

A table becomes a dataclass field by field, each value checked against its annotation (Literal choices, tuples,
optional types, paths, bool, int, float, str); a problem is appended to `errors` as a message that starts with the
full key path, and conversion goes on, so that memd.config reports every problem at once. It knows no section or
key of memd's configuration (but the octal `socket_mode`): memd.config holds those and calls in here. `to_plain`
is the way back, for `config show` and for workspace overrides merged over the global tables.
Imports memd.locate.
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from memd.locate import expand_path


def as_table(value: Any, where: str, errors: list[str]) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    errors.append(f"{where}: expected a table")
    return {}


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """A config class's resolved annotations; cached, since every workspace builds the same few classes (about a
    fifth of the start at 1,000 workspaces was spent resolving them again)."""
    return typing.get_type_hints(cls)


def build(cls: type, raw: Mapping[str, Any], where: str, env: Mapping[str, str], errors: list[str]) -> Any:
    hints = _hints(cls)
    known = {f.name for f in fields(cls)}
    for key in raw:
        if key not in known:
            errors.append(f"{where}.{key}: unknown key (known: {', '.join(sorted(known))})")
    values: dict[str, Any] = {}
    for f in fields(cls):
        if f.name in raw:
            values[f.name] = convert(hints[f.name], raw[f.name], f"{where}.{f.name}", env, errors)
    return cls(**values)


def convert(tp: Any, value: Any, where: str, env: Mapping[str, str], errors: list[str]) -> Any:
    origin = get_origin(tp)
    if origin is Literal:
        choices = get_args(tp)
        if value not in choices:
            errors.append(f"{where}: {value!r} is not one of {', '.join(repr(c) for c in choices)}")
        return value
    if origin is tuple:
        item_type = get_args(tp)[0]
        if not isinstance(value, list):
            errors.append(f"{where}: expected a list")
            return ()
        return tuple(convert(item_type, item, f"{where}[{i}]", env, errors) for i, item in enumerate(value))
    if origin in (types.UnionType, typing.Union):
        inner = next(a for a in get_args(tp) if a is not type(None))
        return convert(inner, value, where, env, errors)
    if tp is Path:
        if not isinstance(value, str) or not value:
            errors.append(f"{where}: expected a non-empty path string")
            return Path(".")
        return _expand_path(value, where, env, errors)
    if tp is bool:
        if not isinstance(value, bool):
            errors.append(f"{where}: expected true or false")
        return value
    if tp is int:
        if where.endswith("socket_mode") and isinstance(value, str):
            try:
                return int(value, 8)
            except ValueError:
                errors.append(f'{where}: expected an octal mode such as "0600"')
                return 0o600
        if isinstance(value, bool) or not isinstance(value, int):
            errors.append(f"{where}: expected an integer")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            errors.append(f"{where}: expected a number")
            return value
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            errors.append(f"{where}: expected a string")
        return value
    raise TypeError(f"config type {tp!r} at {where} has no converter")  # a bug in this module, not user input


def _expand_path(value: str, where: str, env: Mapping[str, str], errors: list[str]) -> Path:
    unset: list[str] = []
    path = expand_path(value, env, unset)  # memd.locate's: the clients expand server.socket the same way
    errors.extend(f"{where}: ${name} is not set in the environment" for name in unset)
    return path


def to_plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        # A key whose value is None (unset, such as metrics.textfile) is left out: TOML has no null.
        return {f.name: to_plain(v) for f in fields(value) if (v := getattr(value, f.name)) is not None}
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return [to_plain(v) for v in value]
    return value
