"""`memd mcp`: an MCP server over stdio (the official `mcp` SDK's low-level server) in front of the daemon.

It keeps no state and opens no memory file: every tool call, resource read and prompt is one or two requests to
the running daemon over its socket, made with the credentials of whoever started this process, so the
workspace's access rules hold as for any client. Tools are the methods declared with an `mcp` exposure
(memd.methods): their names, descriptions, JSON schemas and read-only/destructive hints come from there, so a
method declared tomorrow appears here without an edit. Answers are short text (memd.frontends.render), or the
daemon's JSON with `format: "json"`. A failure is a tool error whose text says what to do.

Resources: `memd://WS/hot`, `memd://WS/warm/YYYY-MM-DD`, `memd://WS/cold`; prompt: `resume`. Imports the `mcp` SDK,
memd.async_client, memd.methods, memd.declare, memd.frontends.project and memd.frontends.render.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

from memd import __version__
from memd.async_client import AsyncClient
from memd.declare import Method, input_schema
from memd.errors import AccessDenied, MemdError
from memd.frontends.project import choose_workspace
from memd.frontends.render import resume_text, short
from memd.methods import DECLARED

INSTRUCTIONS = (
    "memd is this project's long-term memory, shared by every agent and session that works on it. At the start "
    "of a session (and after your context was compacted) call resume_context. As you work, keep it current: "
    "update_progress when the step changes, record_decision for choices a later session must not undo, "
    "log_activity for meaningful steps, add_note for working findings, learn for lasting project knowledge. "
    'Tools answer in short text; pass format: "json" for the full data.'
)
WORKSPACE_DOC = "the memory workspace; default: the one this project uses (see memory_status for the others)"
FORMAT = {
    "type": "string",
    "enum": ["text", "json"],
    "default": "text",
    "description": "text: a short summary (default); json: the full result",
}
URI = re.compile(r"^memd://(?P<ws>[A-Za-z0-9][A-Za-z0-9._-]{0,63})/(?P<tier>hot|cold|warm/(?P<date>\d{4}-\d\d-\d\d))$")


def tools() -> dict[str, Method]:
    """Tool name -> the method it calls, for every method declared with an MCP exposure."""
    return {m.mcp.name: m for m in DECLARED.values() if m.mcp is not None}


def tool_schema(method: Method) -> dict[str, Any]:
    """A tool's input schema: the method's parameters (memd.declare.input_schema), the workspace optional (this
    server knows the project's), and `format`."""
    schema = input_schema(method, WORKSPACE_DOC, workspace_required=False)
    schema["properties"]["format"] = FORMAT
    return schema


def tool_of(method: Method) -> types.Tool:
    assert method.mcp is not None
    t = method.mcp
    return types.Tool(
        name=t.name,
        description=t.description,
        input_schema=tool_schema(method),
        annotations=types.ToolAnnotations(
            read_only_hint=t.read_only,
            destructive_hint=t.destructive if not t.read_only else None,
            idempotent_hint=t.idempotent if not t.read_only else None,
            open_world_hint=False,
        ),
    )


def advice(exc: MemdError) -> str:
    """The error's text, and what to do about it where the daemon's message does not say."""
    text = f"memd: {exc.message}"
    if isinstance(exc, AccessDenied) and (exc.data or {}).get("workspace"):
        text += " (a person can grant it in memd's config: the workspace's `writers`/`readers`)"
    return text


class Backend:
    """The daemon, as this server uses it: one connection, and which workspace "this project" means."""

    def __init__(self, socket: Path, workspace: str | None, start: Path, timeout: float = 30.0) -> None:
        self.socket = socket
        self.explicit = workspace
        self.start = start
        self.client = AsyncClient(socket, timeout=timeout)

    async def call(self, method: str, **params: Any) -> Any:
        return await self.client.call(method, **params)

    async def workspace(self, given: Any = None) -> str:
        if isinstance(given, str) and given:
            return given
        if self.explicit:
            return self.explicit
        listing = await self.call("workspace.list")
        return choose_workspace(self.start, listing["workspaces"])  # asked each time: the config may change


def build_server(backend: Backend) -> Server[Any]:
    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[tool_of(m) for m in tools().values()])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        method = tools().get(params.name)
        if method is None:
            return _tool_error(f"memd: no tool {params.name!r}; the tools are {', '.join(sorted(tools()))}")
        args = dict(params.arguments or {})
        as_json = args.pop("format", "text") == "json"
        try:
            ws = ""
            if method.workspace != "none":
                ws = await backend.workspace(args.pop("workspace", None))
                args["workspace"] = ws
            result = await backend.call(method.name, **args)
        except MemdError as exc:
            return _tool_error(advice(exc))
        except OSError as exc:
            return _tool_error(f"memd: lost the connection to memd ({exc}); check it runs: memd status")
        text = json.dumps(result, ensure_ascii=False, indent=1) if as_json else short(method.name, result, ws)
        return types.CallToolResult(content=[types.TextContent(text=text)])

    async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        try:
            ws = await backend.workspace()
            recent = await backend.call("warm.recent", workspace=ws)
        except (MemdError, OSError):
            return types.ListResourcesResult(resources=[])  # nothing to list; reads will say why
        resources = [
            types.Resource(uri=f"memd://{ws}/hot", name=f"{ws}: working context", mime_type="text/markdown"),
            types.Resource(uri=f"memd://{ws}/cold", name=f"{ws}: learnings", mime_type="text/markdown"),
        ]
        resources += [
            types.Resource(
                uri=f"memd://{ws}/warm/{d['date']}", name=f"{ws}: activity {d['date']}", mime_type="text/markdown"
            )
            for d in recent["days"]
        ]
        return types.ListResourcesResult(resources=resources)

    async def list_templates(ctx: Any, params: Any) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(uri_template="memd://{workspace}/hot", name="working context (hot tier)"),
                types.ResourceTemplate(uri_template="memd://{workspace}/warm/{date}", name="one day of activity"),
                types.ResourceTemplate(uri_template="memd://{workspace}/cold", name="long-term learnings"),
            ]
        )

    async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        uri = str(params.uri)
        match = URI.match(uri)
        if match is None:
            raise MCPError(
                types.INVALID_PARAMS, f"not a memd resource: {uri} (memd://WS/hot, memd://WS/warm/DATE, memd://WS/cold)"
            )
        ws, tier = match["ws"], match["tier"]
        try:
            if tier == "hot":
                text = str((await backend.call("hot.get", workspace=ws))["rendered"])
            elif tier == "cold":
                text = short("cold.get", await backend.call("cold.get", workspace=ws))
            else:
                day = await backend.call("warm.day", workspace=ws, date=match["date"])
                text = short("warm.recent", {"days": [day]}) or "(no entries)"
        except MemdError as exc:
            raise MCPError(exc.code, advice(exc)) from None
        except OSError as exc:
            raise MCPError(types.INTERNAL_ERROR, f"memd: lost the connection to memd ({exc})") from None
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type="text/markdown", text=text)]
        )

    async def list_prompts(ctx: Any, params: Any) -> types.ListPromptsResult:
        return types.ListPromptsResult(
            prompts=[
                types.Prompt(
                    name="resume",
                    title="Resume where I left off",
                    description="Load this project's memory and pick up the task where the last session stopped.",
                    arguments=[
                        types.PromptArgument(name="workspace", description=WORKSPACE_DOC, required=False),
                    ],
                )
            ]
        )

    async def get_prompt(ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        if params.name != "resume":
            raise MCPError(types.INVALID_PARAMS, f"no prompt {params.name!r}; the prompt is 'resume'")
        try:
            ws = await backend.workspace((params.arguments or {}).get("workspace"))
            packet = await backend.call("session.start", workspace=ws)
        except MemdError as exc:
            raise MCPError(exc.code, advice(exc)) from None
        except OSError as exc:
            raise MCPError(types.INTERNAL_ERROR, f"memd: lost the connection to memd ({exc})") from None
        text = (
            "Resume where I left off. This is what memd remembers about the work:\n\n"
            + resume_text(packet, ws)
            + "\n\nContinue with the current step (or the first pending action). Keep memd current as you go."
        )
        return types.GetPromptResult(
            description="Resume where I left off",
            messages=[types.PromptMessage(role="user", content=types.TextContent(text=text))],
        )

    return Server(
        "memd",
        version=__version__,
        title="memd memory",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
    )


def _tool_error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


def serve(socket: Path, workspace: str | None, env: Mapping[str, str]) -> int:
    """Run the server on stdin/stdout until the host closes stdin."""
    backend = Backend(socket, workspace or env.get("MEMD_WORKSPACE") or None, Path(os.getcwd()))
    server = build_server(backend)

    async def main() -> None:
        try:
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())
        finally:
            await backend.client.close()

    anyio.run(main)
    return 0
