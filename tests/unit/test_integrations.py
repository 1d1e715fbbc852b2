"""The ready-to-copy files in integrations/ have the shapes their hosts read (docs/agents.md cites each host's
reference), and every command in them is a command line `memd` accepts, for the event it is wired to.

Claude Code and Codex CLI count hook timeouts in seconds, Gemini CLI in milliseconds; each leaves room for memd's
own 2 s deadline (Claude Code's SessionEnd budget is 1.5 s unless a hook's timeout raises it)."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest

from memd import cli
from memd.frontends.hook import event_name
from memd.methods import DECLARED

INTEGRATIONS = Path(__file__).resolve().parents[2] / "integrations"
CLAUDE_EVENTS = {"SessionStart", "PreCompact", "Stop", "SessionEnd", "UserPromptSubmit"}
CODEX_EVENTS = {"SessionStart", "PreCompact", "Stop", "UserPromptSubmit"}
GEMINI_EVENTS = {"SessionStart", "PreCompress", "AfterAgent", "SessionEnd", "BeforeAgent"}


def load_json(path: str) -> dict[str, Any]:
    data = json.loads((INTEGRATIONS / path).read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def load_toml(path: str) -> dict[str, Any]:
    return tomllib.loads((INTEGRATIONS / path).read_text(encoding="utf-8"))


def check_hooks(hooks: dict[str, Any], host: str, events: set[str], timeout: range) -> None:
    """Event -> [{matcher?, hooks: [{type: command, command, timeout}]}], each a valid `memd hook` for that event."""
    assert set(hooks) <= events
    for event, groups in hooks.items():
        assert isinstance(groups, list) and groups
        for group in groups:
            assert set(group) <= {"matcher", "hooks", "sequential"}
            for handler in group["hooks"]:
                assert handler["type"] == "command"
                assert handler["timeout"] in timeout, (event, handler["timeout"])
                words = shlex.split(handler["command"])
                assert words[0] == "memd"
                args = cli.build_parser().parse_args(words[1:])  # a command line memd accepts
                assert (args.command, args.host) == ("hook", host)
                assert event_name(args.event) == event_name(event) is not None, (event, args.event)


def check_mcp_server(entry: dict[str, Any]) -> None:
    assert entry["command"] == "memd" and entry["args"] == ["mcp"]
    assert cli.build_parser().parse_args(entry["args"]).command == "mcp"


def test_claude_code_mcp_json() -> None:
    servers = load_json("claude-code/.mcp.json")["mcpServers"]

    assert set(servers) == {"memd"}
    assert servers["memd"]["type"] == "stdio"
    check_mcp_server(servers["memd"])


def test_claude_code_settings_hooks_and_permissions() -> None:
    settings = load_json("claude-code/.claude/settings.json")

    check_hooks(settings["hooks"], "claude", CLAUDE_EVENTS, range(3, 11))
    assert settings["hooks"]["SessionStart"][0]["matcher"] == "startup|resume|clear|compact"
    assert {"SessionStart", "PreCompact", "Stop", "SessionEnd"} <= set(settings["hooks"])
    # Tools allowed without asking: exactly the memd tools that destroy nothing; undo and restore still ask.
    safe = {f"mcp__memd__{m.mcp.name}" for m in DECLARED.values() if m.mcp is not None and not m.mcp.destructive}
    assert set(settings["permissions"]["allow"]) == safe


def test_codex_config_toml() -> None:
    config = load_toml("codex/.codex/config.toml")

    check_mcp_server(config["mcp_servers"]["memd"])
    assert config["features"]["codex_hooks"] is True
    check_hooks(config["hooks"], "codex", CODEX_EVENTS, range(3, 11))
    assert {"SessionStart", "PreCompact", "Stop"} <= set(config["hooks"])


def test_gemini_settings_json() -> None:
    settings = load_json("gemini/.gemini/settings.json")

    check_mcp_server(settings["mcpServers"]["memd"])
    assert settings["tools"]["enableHooks"] is True
    check_hooks(settings["hooks"], "gemini", GEMINI_EVENTS, range(3000, 10001))
    assert {"SessionStart", "PreCompress", "AfterAgent", "SessionEnd"} <= set(settings["hooks"])
    names = [h["name"] for groups in settings["hooks"].values() for g in groups for h in g["hooks"]]
    assert len(names) == len(set(names))  # Gemini enables and disables hooks by name


@pytest.mark.parametrize("path", sorted(p.relative_to(INTEGRATIONS) for p in INTEGRATIONS.rglob("*") if p.is_file()))
def test_every_file_is_described_in_the_agents_guide(path: Path) -> None:
    guide = (INTEGRATIONS.parent / "docs" / "agents.md").read_text(encoding="utf-8")

    assert f"integrations/{path}" in guide


def test_the_agents_guide_lists_exactly_the_declared_tools_with_their_hints() -> None:
    guide = (INTEGRATIONS.parent / "docs" / "agents.md").read_text(encoding="utf-8")
    rows = {m[0]: (m[1], m[2]) for m in re.findall(r"^\| `(\w+)` \| `([\w.]+)` \| ([^|]+) \|$", guide, re.M)}

    declared = {m.mcp.name: m for m in DECLARED.values() if m.mcp is not None}
    assert set(rows) == set(declared)
    for tool, (method, hint) in rows.items():
        m = declared[tool]
        assert m.name == method
        assert ("read-only" in hint) == m.mcp.read_only and ("destructive" in hint) == m.mcp.destructive
