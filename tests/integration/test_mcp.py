"""`memd mcp` driven by the official `mcp` SDK's own client over stdio, in front of a real daemon.

The server is spawned as an agent host spawns it (`memd mcp`, stdin/stdout), and spoken to with
`mcp.client.stdio.stdio_client` and `mcp.ClientSession`: tools, resources and prompts are listed, every tool is
called, and the failures a host meets (no daemon, a workspace the caller may not write, one that does not exist, a
project without a workspace) come back as tool errors that say what to do.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest
from harness import RunningDaemon, base_config, module_daemon
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from memd.frontends.mcp_server import tool_schema
from memd.methods import DECLARED

T = TypeVar("T")
NOBODY = 65534
STRANGER = 4242  # the only writer of `locked`: not NOBODY


@pytest.fixture(scope="module")
def memd_daemon() -> Iterator[RunningDaemon]:
    with tempfile.TemporaryDirectory(prefix="memd-mcp-") as d:
        root = Path(d)
        project = root / "proj"
        (project / "src").mkdir(parents=True)
        config = base_config(
            root,
            {"alpha": root / "ws" / "alpha", "beta": root / "ws" / "beta", "locked": root / "ws" / "locked"},
            server={"socket_mode": "0666", "allowed_uids": [NOBODY]},
        )
        config["workspaces"]["alpha"].update(project=str(project), budget={"hot": 1500})
        config["workspaces"]["locked"].update(writers=[STRANGER])
        daemon = module_daemon(root, config)
        try:
            yield daemon.start()
        finally:
            daemon.kill()


def server(socket: Path, *args: str, cwd: Path | None = None, as_nobody: bool = False) -> StdioServerParameters:
    command = [sys.executable, "-m", "memd", "--socket", str(socket), "mcp", *args]
    if as_nobody:
        command = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *command]
    return StdioServerParameters(
        command=command[0], args=command[1:], cwd=cwd, env={"HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1"}
    )


def talk(params: StdioServerParameters, body: Callable[[ClientSession], Awaitable[T]]) -> T:
    """Start the server, initialize a session, run `body`, close (as a host does)."""

    async def main() -> T:
        with tempfile.TemporaryFile("w+") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                return await body(session)

    return anyio.run(main)


def text_of(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


def exposed() -> dict[str, Any]:
    return {m.mcp.name: m for m in DECLARED.values() if m.mcp is not None}


# --- listing -------------------------------------------------------------------------------------------------


def test_tools_resources_and_prompts_are_listed_as_declared(memd_daemon: RunningDaemon) -> None:
    async def body(s: ClientSession) -> tuple[Any, Any, Any, Any]:
        return await s.list_tools(), await s.list_resources(), await s.list_resource_templates(), await s.list_prompts()

    tools, resources, templates, prompts = talk(server(memd_daemon.socket_path, "--workspace", "alpha"), body)

    by_name = {t.name: t for t in tools.tools}
    assert set(by_name) == set(exposed())
    for name, method in exposed().items():
        tool = by_name[name]
        assert tool.input_schema == tool_schema(method)  # the schema is the declaration's
        takes_workspace = {"workspace"} if method.workspace != "none" else set()
        assert set(tool.input_schema["properties"]) == {p.name for p in method.params} | takes_workspace | {"format"}
        assert tool.input_schema["required"] == [p.name for p in method.params if p.required]
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is method.mcp.read_only
        if not method.mcp.read_only:
            assert tool.annotations.destructive_hint is method.mcp.destructive
        assert tool.description == method.mcp.description
    assert {n for n, t in by_name.items() if t.annotations and t.annotations.destructive_hint} == {
        "undo_checkpoint",
        "restore_snapshot",
    }
    uris = {str(r.uri) for r in resources.resources}
    assert {"memd://alpha/hot", "memd://alpha/cold"} <= uris
    assert {t.uri_template for t in templates.resource_templates} == {
        "memd://{workspace}/hot",
        "memd://{workspace}/warm/{date}",
        "memd://{workspace}/cold",
    }
    assert [p.name for p in prompts.prompts] == ["resume"]


# --- every tool ------------------------------------------------------------------------------------------------


def test_every_tool_answers_in_short_text_and_in_json_on_request(memd_daemon: RunningDaemon) -> None:
    calls: dict[str, dict[str, Any]] = {
        "resume_context": {"task": "Port the parser"},
        "update_progress": {"step": "tokenizer", "pending_add": ["lexer tests"], "files": ["parser/tokenize.py"]},
        "record_decision": {"action": "split on '::'", "reason": "the grammar says so", "risk": "low"},
        "add_note": {"text": "tokenize.py keeps trailing whitespace"},
        "log_activity": {
            "action": "ran lexer tests",
            "details": {"cmd": "pytest -k lexer", "failed": 0},
            "result": "ok",
        },
        "learn": {"category": "Testing", "learning": "lexer tests need a frozen clock"},
        "recent_activity": {},
        "relevant_learnings": {"topic": "lexer clock"},
        "memory_status": {},
        "history": {"limit": 5},
        "list_checkpoints": {},
    }
    if "search_memory" in exposed():
        calls["search_memory"] = {"query": "lexer"}
    missing = set(exposed()) - set(calls) - {"undo_checkpoint", "restore_snapshot"}
    assert not missing, f"no call for tools {missing}: add one here"

    async def body(s: ClientSession) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, args in calls.items():
            out[name] = await s.call_tool(name, args)
        out["json"] = await s.call_tool("update_progress", {"pending_done": ["lexer tests"], "format": "json"})
        for i in range(12):  # enough working context for a checkpoint to compress
            await s.call_tool("add_note", {"text": f"note {i}: " + "the tokenizer keeps every byte of input " * 8})
        return out

    params = server(memd_daemon.socket_path, "--workspace", "alpha")
    out = talk(params, body)

    for name, result in out.items():
        assert not result.is_error, (name, text_of(result))
    assert "Task: Port the parser" in text_of(out["resume_context"])
    assert "Current step: tokenizer" in text_of(out["update_progress"])
    assert text_of(out["record_decision"]).startswith("Recorded decision: split on '::'")
    assert text_of(out["log_activity"]).startswith("Logged 'ran lexer tests'")
    assert "[Testing] lexer tests need a frozen clock" in text_of(out["relevant_learnings"])
    assert "ran lexer tests -> ok" in text_of(out["recent_activity"])
    assert "alpha: (memory used: hot" in text_of(out["memory_status"])
    assert json.loads(text_of(out["json"]))["pending_actions"] == []
    assert memd_daemon.call("hot.get", workspace="alpha")["hot"]["current_step"] == "tokenizer"

    # The destructive two: undo a checkpoint, restore a snapshot.
    record = memd_daemon.call("checkpoint.run", workspace="alpha")["checkpoint"]
    rev = memd_daemon.call("snapshot.run", workspace="alpha", reason="before the restore")["rev"]
    memd_daemon.call("hot.note", workspace="alpha", text="written after the snapshot")

    async def destructive(s: ClientSession) -> tuple[Any, Any, Any]:
        listed = await s.call_tool("list_checkpoints", {})
        undone = await s.call_tool("undo_checkpoint", {"id": record["id"]})
        restored = await s.call_tool("restore_snapshot", {"rev": rev, "paths": ["hot"]})
        return listed, undone, restored

    listed, undone, restored = talk(params, destructive)
    assert record["id"] in text_of(listed)
    assert not undone.is_error and text_of(undone).startswith(f"Checkpoint {record['id']} undone")
    assert not restored.is_error and text_of(restored).startswith("Restored hot")
    notes = [n["text"] for n in memd_daemon.call("hot.get", workspace="alpha")["hot"].get("notes", [])]
    assert "written after the snapshot" not in notes


def test_resources_and_the_resume_prompt_read_through_the_daemon(memd_daemon: RunningDaemon) -> None:
    memd_daemon.call("warm.log", workspace="beta", action="benchmarked the cache", result="2x")
    memd_daemon.call("cold.learn", workspace="beta", category="Performance", learning="the cache halves p99")
    memd_daemon.call("session.start", workspace="beta", task="Speed up the cache")
    today = memd_daemon.call("warm.recent", workspace="beta", days=1)["days"][0]["date"]

    async def body(s: ClientSession) -> tuple[Any, ...]:
        hot = await s.read_resource("memd://beta/hot")
        warm = await s.read_resource(f"memd://beta/warm/{today}")
        cold = await s.read_resource("memd://beta/cold")
        prompt = await s.get_prompt("resume", {})
        return hot, warm, cold, prompt

    hot, warm, cold, prompt = talk(server(memd_daemon.socket_path, "--workspace", "beta"), body)

    assert "Speed up the cache" in hot.contents[0].text
    assert "benchmarked the cache -> 2x" in warm.contents[0].text
    assert "[Performance] the cache halves p99" in cold.contents[0].text
    message = prompt.messages[0].content.text
    assert message.startswith("Resume where I left off") and "Task: Speed up the cache" in message


# --- which workspace -----------------------------------------------------------------------------------------


def test_without_a_workspace_the_project_of_the_working_directory_decides(memd_daemon: RunningDaemon) -> None:
    project = memd_daemon.root / "proj"

    async def body(s: ClientSession) -> Any:
        return await s.call_tool("log_activity", {"action": "from the project's src"})

    result = talk(server(memd_daemon.socket_path, cwd=project / "src"), body)

    assert not result.is_error, text_of(result)
    entries = memd_daemon.call("warm.recent", workspace="alpha", days=1)["days"][0]["entries"]
    assert entries[-1]["action"] == "from the project's src"


def test_a_directory_bound_to_no_workspace_says_how_to_bind_one(memd_daemon: RunningDaemon, tmp_path: Path) -> None:
    async def body(s: ClientSession) -> Any:
        return await s.call_tool("recent_activity", {})

    result = talk(server(memd_daemon.socket_path, cwd=tmp_path), body)

    assert result.is_error
    text = text_of(result)
    assert "no memd workspace is bound to" in text and ".memd" in text and "alpha, beta, locked" in text


# --- failures ----------------------------------------------------------------------------------------------------


def test_daemon_down_is_a_tool_error_that_says_how_to_start_it(tmp_path: Path) -> None:
    async def body(s: ClientSession) -> tuple[Any, Any]:
        return await s.list_tools(), await s.call_tool("resume_context", {})

    tools, result = talk(server(tmp_path / "nothing.sock", "--workspace", "alpha"), body)

    assert tools.tools  # the server itself runs: the host can show its tools and the error
    assert result.is_error
    assert "memd is not running" in text_of(result) and "memd run" in text_of(result)


def test_an_unknown_workspace_names_the_known_ones(memd_daemon: RunningDaemon) -> None:
    async def body(s: ClientSession) -> Any:
        return await s.call_tool("add_note", {"text": "x", "workspace": "nope"})

    result = talk(server(memd_daemon.socket_path, "--workspace", "alpha"), body)

    assert result.is_error
    assert "no workspace named 'nope'" in text_of(result) and "alpha, beta, locked" in text_of(result)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_access_rules_hold_for_the_user_who_started_the_server(memd_daemon: RunningDaemon) -> None:
    for directory in memd_daemon.socket_path.parents:  # let uid 65534 reach the socket (memd checks the rest)
        if directory == Path(tempfile.gettempdir()):
            break
        directory.chmod(directory.stat().st_mode | 0o001)

    async def body(s: ClientSession) -> tuple[Any, Any]:
        denied = await s.call_tool("add_note", {"text": "from nobody"})
        return denied, await s.call_tool("add_note", {"text": "ok", "workspace": "beta"})

    denied, allowed = talk(server(memd_daemon.socket_path, "--workspace", "locked", as_nobody=True), body)

    assert denied.is_error
    assert f"uid {NOBODY} may not write to workspace 'locked'" in text_of(denied)
    assert "writers" in text_of(denied)
    assert not allowed.is_error, text_of(allowed)
