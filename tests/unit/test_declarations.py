"""Every method is declared once (memd/methods.py), and what derives from the declarations stays in step with them:
the handler table, dispatch's checks, the protocol doc, `memd call`, the readable CLI commands and the MCP tools.

The last tests add a method the way a developer would (one declaration and its handler) and find it everywhere.
"""

from __future__ import annotations

import argparse
import asyncio
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from memd import cli, handlers
from memd.declare import Method, Param, Tool, doc_table, input_schema
from memd.errors import AccessDenied, InvalidParams, MethodNotFound
from memd.frontends import mcp_server
from memd.handlers import Call, Peer, dispatch
from memd.methods import DECLARED
from memd.params import Params

PROTOCOL = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
OWN_UID = 1000


def protocol_table() -> str:
    text = PROTOCOL.read_text(encoding="utf-8")
    start = text.index("| method | access |")
    return text[start : text.index("\n\n", start) + 1]


def section(name: str) -> str:
    text = PROTOCOL.read_text(encoding="utf-8")
    start = text.index(f"### `{name}`\n")
    following = re.search(r"^##+ ", text[start + 4 :], re.M)
    return text[start : start + 4 + following.start()] if following else text[start:]


# --- the table and the handlers -----------------------------------------------------------------------------------


def test_every_declared_method_has_a_handler_and_every_handler_a_declaration() -> None:
    assert list(handlers.METHODS) == list(DECLARED)


def test_taskless_is_derived_from_the_declarations() -> None:
    assert {m.name for m in DECLARED.values() if m.taskless} == handlers.TASKLESS
    assert "checkpoint.run" not in handlers.TASKLESS  # awaits the summarizer under a deadline: needs a Task


def test_every_method_with_a_workspace_is_read_or_write_and_every_other_public_or_admin() -> None:
    for m in DECLARED.values():
        assert (m.access in ("read", "write")) == (m.workspace != "none"), m.name


# --- the protocol doc -------------------------------------------------------------------------------------------


def test_the_method_table_of_the_protocol_doc_is_the_declarations() -> None:
    assert protocol_table() == doc_table(DECLARED.values()), (
        "docs/protocol.md's method table differs from memd/methods.py; the table the declarations give is:\n\n"
        + doc_table(DECLARED.values())
    )


@pytest.mark.parametrize("name", list(DECLARED))
def test_each_methods_section_documents_exactly_its_declared_parameters(name: str) -> None:
    documented = set(re.findall(r"^\| `(\w+)` \|", section(name), re.M)) - {"workspace"}

    assert documented == {p.name for p in DECLARED[name].params}


# --- dispatch checks what the declaration says, before the handler runs -------------------------------------------


@dataclass
class FakeConfig:
    writers: tuple[int, ...] = ()
    readers: tuple[int, ...] = ()


@dataclass
class FakeWorkspace:
    name: str
    config: FakeConfig = field(default_factory=FakeConfig)

    def check_identity(self) -> None:
        pass

    def refresh(self) -> None:
        pass


class FakeServices:
    own_uid = OWN_UID

    def __init__(self) -> None:
        self.spaces = {"open": FakeWorkspace("open"), "ruled": FakeWorkspace("ruled", FakeConfig(writers=(2000,)))}

    def workspaces(self) -> dict[str, Any]:
        return self.spaces

    def refused(self) -> dict[str, str]:
        return {}


ECHO = Method(
    "test.echo",
    "say a text back (a test-only method)",
    "write",
    "`{workspace, text, times}`",
    params=(
        Param("text", "string", "what to say", required=True, non_empty=True, max_len=20),
        Param("times", "integer", "how often", minimum=1, maximum=3, default=1),
    ),
    cli=None,
    mcp=Tool("echo_text", "Say a text back (a test-only tool).", read_only=False),
)
RAN: list[str] = []


async def echo(call: Call, p: Params) -> Any:
    RAN.append(call.ws.name)
    return {"workspace": call.ws.name, "text": p.text("text"), "times": p.integer("times")}


@pytest.fixture
def with_echo(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The whole of adding a method: its declaration, and its handler in the table."""
    monkeypatch.setitem(DECLARED, ECHO.name, ECHO)
    monkeypatch.setitem(handlers.METHODS, ECHO.name, echo)
    RAN.clear()
    yield


def call_as(uid: int, method: str, **params: Any) -> Any:
    return asyncio.run(dispatch(Call(FakeServices(), Peer(pid=1, uid=uid, gid=uid)), method, params))  # type: ignore[arg-type]


def test_a_method_that_is_declared_and_has_a_handler_is_dispatched_with_its_workspace(with_echo: None) -> None:
    assert call_as(2000, "test.echo", workspace="ruled", text="hi") == {"workspace": "ruled", "text": "hi", "times": 1}


@pytest.mark.parametrize(
    ("uid", "params", "error", "words"),
    [
        (2000, {"workspace": "ruled", "text": "hi", "tmes": 2}, InvalidParams, "unknown parameter(s) tmes"),
        (3000, {"workspace": "ruled", "text": "hi"}, AccessDenied, "uid 3000 may not write to workspace 'ruled'"),
        (2000, {"text": "hi"}, InvalidParams, "missing parameter 'workspace'"),
        (2000, {"workspace": "ruled", "text": "x" * 21}, InvalidParams, "longer than 20 characters"),
        (2000, {"workspace": "ruled", "text": "hi", "times": 4}, InvalidParams, "from 1 to 3"),
    ],
)
def test_dispatch_refuses_from_the_declaration(
    with_echo: None, uid: int, params: dict[str, Any], error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=re.escape(words)):
        call_as(uid, "test.echo", **params)


def test_access_is_checked_before_the_handler_runs(with_echo: None) -> None:
    with pytest.raises(AccessDenied):
        call_as(3000, "test.echo", workspace="ruled", text="hi")

    assert RAN == []


def test_admin_and_every_workspace_scopes_come_from_the_declaration() -> None:
    with pytest.raises(AccessDenied, match=re.escape("config.reload is for root or memd's own uid")):
        call_as(3000, "config.reload")
    with pytest.raises(AccessDenied, match="acts on every workspace"):
        call_as(3000, "retention.sweep", dry_run=True)
    with pytest.raises(MethodNotFound):
        call_as(OWN_UID, "no.such")


def test_a_new_method_is_in_memd_call_in_mcp_and_missing_from_the_doc_table(with_echo: None) -> None:
    parsed = cli.build_parser().parse_args(["call", "test.echo", "open", "--text", "hi", "--times", "2"])
    assert cli.call_params(parsed) == ("test.echo", {"workspace": "open", "text": "hi", "times": 2})

    tool = mcp_server.tool_of(ECHO)
    assert "echo_text" in mcp_server.tools()
    assert tool.input_schema == mcp_server.tool_schema(ECHO)
    assert tool.input_schema["properties"]["times"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 3,
        "description": "how often",
        "default": 1,
    }

    assert "| [`test.echo`](#testecho) | write | say a text back (a test-only method) | — | `echo_text` |" in doc_table(
        DECLARED.values()
    )
    assert protocol_table() != doc_table(DECLARED.values())  # the doc test would fail until its row is added


# --- the readable CLI commands cover the declarations -------------------------------------------------------------

# One command line per readable command; each must call the method whose declaration names that command.
COMMAND_LINES = {
    "ping": ["ping"],
    "status": ["status"],
    "metrics": ["metrics"],
    "workspaces": ["workspaces"],
    "reload": ["reload"],
    "start-session": ["start-session", "w", "task"],
    "progress": ["progress", "w", "--step", "s"],
    "decide": ["decide", "w", "a", "--reason", "r"],
    "note": ["note", "w", "t"],
    "hot": ["hot", "w"],
    "log": ["log", "w", "a"],
    "recent": ["recent", "w"],
    "day": ["day", "w", "2026-11-30"],
    "sweep": ["sweep", "--dry-run"],
    "learn": ["learn", "w", "c", "t"],
    "memory": ["memory", "w"],
    "context": ["context", "w"],
    "proposals": ["proposals", "w"],
    "accept": ["accept", "w", "p-1a2b3c4d"],
    "reject": ["reject", "w", "p-1a2b3c4d"],
    "search": ["search", "w", "jwt keys"],
    "reindex": ["reindex", "w"],
    "snapshot": ["snapshot", "w"],
    "restore": ["restore", "w", "HEAD"],
    "push": ["push", "w"],
    "sync": ["sync", "w"],
    "history": ["history", "w"],
    "show": ["show", "w", "HEAD:hot/context.json"],
    "diff": ["diff", "w", "HEAD"],
    "checkpoint": ["checkpoint", "w"],
    "checkpoints": ["checkpoints", "w"],
    "checkpoint show": ["checkpoint", "show", "w", "ckpt-1"],
    "checkpoint undo": ["checkpoint", "undo", "w", "ckpt-1"],
}


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def call(self, method: str, **params: Any) -> Any:
        self.calls.append((method, params))
        raise InvalidParams("recorded")  # the command stops here: only the method it chose matters


def test_every_method_is_reachable_from_a_readable_command_or_declares_none() -> None:
    assert {m.cli for m in DECLARED.values() if m.cli} == set(COMMAND_LINES)


@pytest.mark.parametrize("command", list(COMMAND_LINES))
def test_each_readable_command_calls_the_method_that_declares_it(command: str) -> None:
    args = cli.build_parser().parse_args(COMMAND_LINES[command])
    recorder = Recorder()

    with pytest.raises(InvalidParams, match="recorded"):
        cli._client_command(args, recorder, None)  # type: ignore[arg-type]

    (method, params), *_ = recorder.calls
    assert DECLARED[method].cli == command
    assert set(params) <= DECLARED[method].allowed()


def test_memd_call_has_a_subcommand_for_every_declared_method() -> None:
    parser = cli.build_parser()
    call = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["call"]
    methods = next(a for a in call._actions if isinstance(a, argparse._SubParsersAction)).choices

    assert list(methods) == list(DECLARED)


def test_memd_call_turns_options_into_the_declared_parameters() -> None:
    argv = ["call", "warm.log", "w", "--action", "ran tests", "--details", "cmd=pytest -x", "--details", "n=3"]
    assert cli.call_params(cli.build_parser().parse_args(argv)) == (
        "warm.log",
        {"workspace": "w", "action": "ran tests", "details": {"cmd": "pytest -x", "n": "3"}},
    )
    argv = ["call", "progress.update", "w", "--pending-add", "a", "--pending-add", "b", "--step", ""]
    assert cli.call_params(cli.build_parser().parse_args(argv))[1] == {
        "workspace": "w",
        "pending_add": ["a", "b"],
        "step": "",
    }
    argv = ["call", "retention.sweep", "--no-dry-run"]
    assert cli.call_params(cli.build_parser().parse_args(argv)) == ("retention.sweep", {"dry_run": False})


def test_schemas_mark_what_is_required() -> None:
    schema = input_schema(DECLARED["decision.record"])
    assert schema["required"] == ["workspace", "action", "reason"]
    assert schema["properties"]["action"]["maxLength"] == 512
    assert schema["additionalProperties"] is False
