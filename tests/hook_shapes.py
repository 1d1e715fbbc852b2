"""Hook input as each agent host sends it, recorded from the hosts' own documentation (docs/agents.md cites them):

- Claude Code: the hooks reference (code.claude.com/docs/en/hooks), the JSON examples of SessionStart,
  UserPromptSubmit, Stop, PreCompact and SessionEnd;
- Codex CLI: the JSON schemas the Codex source ships (codex-rs/hooks/schema/generated/*.command.input.schema.json):
  every required field, with `transcript_path` null as the schema allows;
- Gemini CLI: its hooks reference (docs/hooks/reference.md): the base fields plus each event's own.

`cwd` is a placeholder the tests replace with a project directory of their own.
"""

from __future__ import annotations

from typing import Any

CWD = "/placeholder/project"
CLAUDE_TRANSCRIPT = "/Users/me/.claude/projects/proj/00893aaf-19fa-41d2-8238-13269b9b3ca0.jsonl"

CLAUDE: dict[str, dict[str, Any]] = {
    "SessionStart": {
        "session_id": "abc123",
        "transcript_path": CLAUDE_TRANSCRIPT,
        "cwd": CWD,
        "hook_event_name": "SessionStart",
        "source": "startup",
        "model": "claude-sonnet-4-6",
    },
    "UserPromptSubmit": {
        "session_id": "abc123",
        "transcript_path": CLAUDE_TRANSCRIPT,
        "cwd": CWD,
        "permission_mode": "default",
        "hook_event_name": "UserPromptSubmit",
        "prompt": "Write a function to calculate the factorial of a number",
    },
    "Stop": {
        "session_id": "abc123",
        "transcript_path": CLAUDE_TRANSCRIPT,
        "cwd": CWD,
        "permission_mode": "default",
        "hook_event_name": "Stop",
        "stop_hook_active": True,
        "last_assistant_message": "I've completed the refactoring. Here's a summary...",
    },
    "PreCompact": {
        "session_id": "abc123",
        "transcript_path": CLAUDE_TRANSCRIPT,
        "cwd": CWD,
        "hook_event_name": "PreCompact",
        "trigger": "manual",
        "custom_instructions": "",
    },
    "SessionEnd": {
        "session_id": "abc123",
        "transcript_path": CLAUDE_TRANSCRIPT,
        "cwd": CWD,
        "hook_event_name": "SessionEnd",
        "reason": "other",
    },
}
CLAUDE_SOURCES = ("startup", "resume", "clear", "compact")

_CODEX_BASE = {"cwd": CWD, "model": "gpt-5-codex", "session_id": "019a-codex-session", "transcript_path": None}
CODEX: dict[str, dict[str, Any]] = {
    "SessionStart": {
        **_CODEX_BASE,
        "hook_event_name": "SessionStart",
        "permission_mode": "default",
        "source": "startup",
    },
    "UserPromptSubmit": {
        **_CODEX_BASE,
        "hook_event_name": "UserPromptSubmit",
        "permission_mode": "default",
        "prompt": "fix the flaky login test",
        "turn_id": "turn-1",
    },
    "PreCompact": {**_CODEX_BASE, "hook_event_name": "PreCompact", "trigger": "auto", "turn_id": "turn-7"},
    "Stop": {
        **_CODEX_BASE,
        "hook_event_name": "Stop",
        "last_assistant_message": "Done: the login test is fixed.",
        "permission_mode": "default",
        "stop_hook_active": False,
        "turn_id": "turn-7",
    },
}
# What Codex accepts back (the same source's *.command.output.schema.json; additionalProperties false throughout).
CODEX_OUTPUT_KEYS = {
    "continue",
    "stopReason",
    "suppressOutput",
    "systemMessage",
    "hookSpecificOutput",
    "decision",
    "reason",
}
CODEX_CONTEXT_KEYS = {"hookEventName", "additionalContext", "env"}

_GEMINI_BASE = {
    "session_id": "gemini-session-1",
    "transcript_path": "/home/me/.gemini/tmp/proj/chats/session.json",
    "cwd": CWD,
    "timestamp": "2026-11-30T10:30:00Z",
}
GEMINI: dict[str, dict[str, Any]] = {
    "SessionStart": {**_GEMINI_BASE, "hook_event_name": "SessionStart", "source": "startup"},
    "BeforeAgent": {**_GEMINI_BASE, "hook_event_name": "BeforeAgent", "prompt": "Fix the authentication bug"},
    "PreCompress": {**_GEMINI_BASE, "hook_event_name": "PreCompress", "trigger": "auto"},
    "AfterAgent": {
        **_GEMINI_BASE,
        "hook_event_name": "AfterAgent",
        "prompt": "Fix the authentication bug",
        "prompt_response": "Fixed: the token check compared the wrong clock.",
        "stop_hook_active": False,
    },
    "SessionEnd": {**_GEMINI_BASE, "hook_event_name": "SessionEnd", "reason": "exit"},
}
