"""`memd hook EVENT --host claude|codex|gemini`: an agent host's lifecycle hook, in that host's own format.

The host runs this with its hook JSON on stdin (`session_id`, `transcript_path`, `cwd`, `hook_event_name` and the
event's fields) and reads stdout. Events (memd's names; the hosts' own names are accepted too):

- session-start (Claude Code/Codex `SessionStart` with source startup/resume/clear/compact, Gemini's): starts or
  resumes the memd session of the workspace of the hook's `cwd` and answers the resume context as
  `hookSpecificOutput.additionalContext`, cut to the host's limit (Claude Code caps injected context at 10,000
  characters);
- pre-compact (`PreCompact`, Gemini's `PreCompress`): a warm entry, a snapshot, and a checkpoint request the daemon
  runs only if hot is over its threshold (sent as a notification: the hook does not wait for a summarizer), so
  that the next session start, the one after compaction, brings it back;
- stop (`Stop`, Gemini's `AfterAgent`) and session-end (`SessionEnd`): a warm entry and a snapshot;
- prompt-submit (`UserPromptSubmit`, Gemini's `BeforeAgent`; only where a person enabled it): the top hits of
  `memory.search` for the prompt, when the daemon has that method.

Every hook fails open: whatever goes wrong (no daemon, no workspace, bad input, over the deadline, a bug), it exits
0 within the deadline (2 s by default), prints nothing on stdout and says why on stderr. It never exits 2, which
the hosts read as "block". Imports memd.client, memd.methods, memd.frontends.project and memd.frontends.render.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from memd.client import Client
from memd.errors import MemdError
from memd.frontends.project import choose_workspace
from memd.frontends.render import fit, resume_text
from memd.methods import DECLARED

HOSTS = ("claude", "codex", "gemini")
EVENTS = ("session-start", "pre-compact", "stop", "session-end", "prompt-submit")
ALIASES = {
    "sessionstart": "session-start",
    "precompact": "pre-compact",
    "precompress": "pre-compact",
    "stop": "stop",
    "afteragent": "stop",
    "sessionend": "session-end",
    "userpromptsubmit": "prompt-submit",
    "beforeagent": "prompt-submit",
    "promptsubmit": "prompt-submit",
}
# What each host calls the events that answer with context (hookSpecificOutput.hookEventName).
CONTEXT_EVENT = {
    ("claude", "session-start"): "SessionStart",
    ("codex", "session-start"): "SessionStart",
    ("gemini", "session-start"): "SessionStart",
    ("claude", "prompt-submit"): "UserPromptSubmit",
    ("codex", "prompt-submit"): "UserPromptSubmit",
    ("gemini", "prompt-submit"): "BeforeAgent",
}
LIMITS = {"claude": 10_000, "codex": 10_000, "gemini": 10_000}  # characters of injected context
PROMPT_HITS_CHARS = 2_000  # a prompt's hits: a hint, not a second resume
DEADLINE = 2.0
MAX_INPUT = 1 << 20


class HookTimeout(Exception):
    pass


def event_name(text: str) -> str | None:
    """memd's name for `text` (memd's own, or a host's event name), or None."""
    if text in EVENTS:
        return text
    return ALIASES.get(re.sub(r"[-_\s]", "", text).lower())


def run(
    event: str,
    host: str,
    socket: Callable[[], Path],
    workspace: str | None,
    stdin: TextIO,
    stdout: TextIO,
    stderr: TextIO,
    deadline: float = DEADLINE,
    max_chars: int | None = None,
) -> int:
    """Run one hook; always 0. `socket` finds the daemon's socket (it may raise: a bad config fails open too)."""
    started = time.monotonic()

    def expired(signum: int, frame: FrameType | None) -> None:
        raise HookTimeout

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, deadline)
    try:
        name = event_name(event)
        if name is None:
            raise ValueError(f"unknown event {event!r} (one of {', '.join(EVENTS)})")
        payload = _read(stdin)
        remaining = max(0.1, deadline - (time.monotonic() - started))
        with Client(socket(), timeout=remaining) as client:
            answer = _handle(name, host, payload, client, workspace, max_chars or LIMITS[host])
        if answer is not None:
            stdout.write(json.dumps(answer, ensure_ascii=False) + "\n")
            stdout.flush()
    except HookTimeout:
        print(f"memd hook {event}: gave up after {deadline:g}s (is memd busy or stuck? `memd status`)", file=stderr)
    except MemdError as exc:
        print(f"memd hook {event}: {exc.message}", file=stderr)
    except Exception as exc:  # fail open, whatever it is: the host's session matters more than its memory
        print(f"memd hook {event}: {type(exc).__name__}: {exc}", file=stderr)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return 0


def _read(stdin: TextIO) -> dict[str, Any]:
    text = stdin.read(MAX_INPUT + 1)
    if len(text) > MAX_INPUT:
        raise ValueError(f"hook input over {MAX_INPUT} characters")
    payload = json.loads(text) if text.strip() else {}
    if not isinstance(payload, dict):
        raise ValueError("hook input is not a JSON object")
    return payload


def _text(payload: Mapping[str, Any], key: str, max_len: int = 512) -> str | None:
    value = payload.get(key)
    return value if isinstance(value, str) and value.strip() and len(value) <= max_len else None


def _handle(
    event: str, host: str, payload: Mapping[str, Any], client: Client, explicit: str | None, limit: int
) -> dict[str, Any] | None:
    if explicit:
        ws = explicit
    else:
        cwd = _text(payload, "cwd", 4096)
        ws = choose_workspace(Path(cwd) if cwd else Path.cwd(), client.call("workspace.list")["workspaces"])
    session = _text(payload, "session_id")
    if event == "session-start":
        packet = client.call("session.start", workspace=ws, **({"session_id": session} if session else {}))
        return _context(host, event, resume_text(packet, ws, limit))
    if event == "prompt-submit":
        return _prompt_hits(host, payload, client, ws, min(limit, PROMPT_HITS_CHARS))
    details = {"host": host, "session_id": session or "", "event": str(payload.get("hook_event_name") or event)}
    for key in ("trigger", "source", "reason"):
        if _text(payload, key):
            details[key] = str(payload[key])
    if event == "pre-compact":
        client.call("warm.log", workspace=ws, action="context compaction", details=details)
        _snapshot(client, ws, f"before {host} compaction")
        client.notify("checkpoint.run", workspace=ws, force=False)  # the daemon decides; nothing to wait for
        return None
    said = _text(payload, "last_assistant_message", 1 << 20) or _text(payload, "prompt_response", 1 << 20)
    result = said.strip().splitlines()[0][:300] if said else None
    action = "agent turn ended" if event == "stop" else "session ended"
    client.call("warm.log", workspace=ws, action=action, details=details, **({"result": result} if result else {}))
    _snapshot(client, ws, f"{host} {event}")
    return None


def _snapshot(client: Client, ws: str, reason: str) -> None:
    with contextlib.suppress(MemdError):  # snapshots off or git failing: the entry is logged, status tells the rest
        client.call("snapshot.run", workspace=ws, reason=reason)


def _context(host: str, event: str, text: str) -> dict[str, Any] | None:
    if not text:
        return None
    return {"hookSpecificOutput": {"hookEventName": CONTEXT_EVENT[(host, event)], "additionalContext": text}}


def _prompt_hits(host: str, payload: Mapping[str, Any], client: Client, ws: str, limit: int) -> dict[str, Any] | None:
    prompt = payload.get("prompt")
    if "memory.search" not in DECLARED or not isinstance(prompt, str):
        return None
    words = list(dict.fromkeys(w.lower() for w in re.findall(r"[^\W_]{4,}", prompt)))[:8]
    if not words:
        return None
    found = client.call("memory.search", workspace=ws, query=" OR ".join(words), limit=3)
    lines = ["memd: from this project's memory, maybe relevant to the prompt:"]
    for hit in found.get("hits") or []:
        where = " ".join(str(hit[k]) for k in ("tier", "date") if hit.get(k))
        text = hit.get("snippet") or hit.get("heading") or hit.get("text") or json.dumps(hit, ensure_ascii=False)
        lines.append(f"- ({where}) {' '.join(str(text).split())}")
    return _context(host, "prompt-submit", fit(lines, limit)) if len(lines) > 1 else None
