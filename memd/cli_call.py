"""`memd call METHOD [WS] [--param VALUE ...]`: every declared method from the command line, derived.

Each method of memd.methods gets a subcommand whose options are its declared parameters (`--session-id` for
`session_id`; lists repeat the option; details are `--details KEY=VALUE`; booleans are `--flag`/`--no-flag`),
with the workspace as the first argument when the method takes one. A method declared tomorrow is callable here
with no edit; the readable commands (`memd log`, `memd decide`, ...) stay hand-made in memd.cli_parser, and a test
checks that they cover the declarations. The result is printed as JSON. Imports memd.methods and memd.declare.
"""

from __future__ import annotations

import argparse
from typing import Any

from memd.declare import Method, Param
from memd.methods import DECLARED


class CallUsageError(Exception):
    """An argument `memd call` cannot turn into a parameter (exit 2)."""


def _flag(p: Param) -> str:
    return "--" + p.name.replace("_", "-")


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add `call` and one subcommand per declared method under it."""
    call = sub.add_parser(
        "call",
        parents=[common],
        help="call any protocol method by name; prints its JSON result",
        description="call any protocol method by name (docs/protocol.md); prints its JSON result",
    )
    methods = call.add_subparsers(dest="method", required=True, metavar="METHOD")
    for m in DECLARED.values():
        p = methods.add_parser(m.name, parents=[common], help=m.summary, description=f"{m.summary}; returns {m.result}")
        _add_arguments(p, m)


def _add_arguments(parser: argparse.ArgumentParser, m: Method) -> None:
    if m.workspace == "required":
        parser.add_argument("workspace", help="workspace name (as `memd workspaces` lists them)")
    elif m.workspace != "none":
        parser.add_argument("workspace", nargs="?", help="workspace name (default: every workspace)")
    for p in m.params:
        kwargs: dict[str, Any] = {"dest": f"param_{p.name}", "help": p.doc}
        if p.kind == "boolean":
            kwargs["action"] = argparse.BooleanOptionalAction
        elif p.kind in ("strings", "details"):
            kwargs.update(action="append", metavar="KEY=VALUE" if p.kind == "details" else "VALUE")
        else:
            kwargs.update(type=int if p.kind == "integer" else str, metavar=p.name.upper(), required=p.required)
        parser.add_argument(_flag(p), **kwargs)


def call_params(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """The method and the parameters `memd call` sends (options left out are not sent)."""
    m = DECLARED[args.method]
    params: dict[str, Any] = {}
    if m.workspace != "none" and args.workspace is not None:
        params["workspace"] = args.workspace
    for p in m.params:
        value = getattr(args, f"param_{p.name}")
        if value is None:
            continue
        if p.kind == "details":
            pairs = [item.partition("=") for item in value]
            bad = [item for item, (_, sep, _) in zip(value, pairs, strict=True) if not sep]
            if bad:
                raise CallUsageError(f"{_flag(p)} {bad[0]!r}: expected KEY=VALUE")
            value = {key: val for key, _, val in pairs}
        params[p.name] = value
    return m.name, params
