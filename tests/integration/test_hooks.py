"""`memd hook` as the agent hosts run it: a process with the host's JSON on stdin (tests/hook_shapes.py, recorded
from each host's documentation), read back as the host reads it, against a real daemon.

What a host relies on: session start answers the resume context in its format and within its limit; compaction,
stop and session end leave a warm entry and a snapshot; and whatever goes wrong, the hook exits 0 within about
two seconds with nothing on stdout (the reason is on stderr), because a hook that fails can block the host.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import RunningDaemon, base_config, module_daemon
from hook_shapes import CLAUDE, CLAUDE_SOURCES, CODEX, CODEX_CONTEXT_KEYS, CODEX_OUTPUT_KEYS, GEMINI

FAIL_OPEN_SECONDS = 3.5  # the 2 s deadline, plus starting Python on a busy machine


@pytest.fixture(scope="module")
def memd_daemon() -> Iterator[RunningDaemon]:
    with tempfile.TemporaryDirectory(prefix="memd-hook-") as d:
        root = Path(d)
        for name in ("alpha", "big", "marked"):
            (root / "projects" / name / "src").mkdir(parents=True)
        config = base_config(root, {n: root / "ws" / n for n in ("alpha", "big", "other", "marked")})
        config["workspaces"]["alpha"]["project"] = str(root / "projects" / "alpha")
        config["workspaces"]["big"]["project"] = str(root / "projects" / "big")
        (root / "projects" / "marked" / ".memd").write_text("# this project's memory\nmarked\n")
        daemon = module_daemon(root, config)
        try:
            yield daemon.start()
        finally:
            daemon.kill()


def project(daemon: RunningDaemon, name: str) -> Path:
    return daemon.root / "projects" / name


def hook(
    socket_path: Path, event: str, host: str, payload: Any, *extra: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return subprocess.run(
        [sys.executable, "-m", "memd", "--socket", str(socket_path), "hook", event, "--host", host, *extra],
        input=data,
        capture_output=True,
        text=True,
        timeout=30,
        cwd=cwd,
    )


def shaped(shape: dict[str, Any], cwd: Path, **changes: Any) -> dict[str, Any]:
    return {**shape, "cwd": str(cwd), **changes}


def entries(daemon: RunningDaemon, ws: str) -> list[dict[str, Any]]:
    return [e for day in daemon.call("warm.recent", workspace=ws, days=1)["days"] for e in day["entries"]]


# --- session start ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("source", CLAUDE_SOURCES)
def test_claude_session_start_injects_the_resume_context(memd_daemon: RunningDaemon, source: str) -> None:
    memd_daemon.call("session.start", workspace="alpha", task="Fix the flaky login test")
    memd_daemon.call("progress.update", workspace="alpha", step="reproduce it", pending_add=["freeze the clock"])
    payload = shaped(CLAUDE["SessionStart"], project(memd_daemon, "alpha") / "src", source=source)

    done = hook(memd_daemon.socket_path, "session-start", "claude", payload)

    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert set(answer) == {"hookSpecificOutput"}
    assert answer["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    context = answer["hookSpecificOutput"]["additionalContext"]
    assert "Task: Fix the flaky login test" in context and "Current step: reproduce it" in context
    assert "- freeze the clock" in context
    assert memd_daemon.call("hot.get", workspace="alpha")["hot"]["session_id"] == "abc123"  # the host's session


def test_codex_session_start_answers_only_what_codex_accepts(memd_daemon: RunningDaemon) -> None:
    payload = shaped(CODEX["SessionStart"], project(memd_daemon, "alpha"))

    done = hook(memd_daemon.socket_path, "SessionStart", "codex", payload)  # the host's own event name works too

    answer = json.loads(done.stdout)
    assert done.returncode == 0
    assert set(answer) <= CODEX_OUTPUT_KEYS
    assert set(answer["hookSpecificOutput"]) <= CODEX_CONTEXT_KEYS
    assert answer["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    assert "# memd: memory of workspace alpha" in answer["hookSpecificOutput"]["additionalContext"]


def test_gemini_session_start_injects_the_resume_context(memd_daemon: RunningDaemon) -> None:
    payload = shaped(GEMINI["SessionStart"], project(memd_daemon, "alpha"))

    done = hook(memd_daemon.socket_path, "session-start", "gemini", payload)

    answer = json.loads(done.stdout)
    assert done.returncode == 0
    assert answer["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    assert "Task: " in answer["hookSpecificOutput"]["additionalContext"]


def test_the_resume_context_is_cut_to_the_hosts_limit_at_a_line(memd_daemon: RunningDaemon) -> None:
    memd_daemon.call("session.start", workspace="big", task="A task with a long memory")
    for i in range(15):  # the packet carries the last 10 notes and 10 entries: over 15,000 characters here
        memd_daemon.call("hot.note", workspace="big", text=f"note {i}: " + "a finding worth keeping " * 40)
        memd_daemon.call("warm.log", workspace="big", action=f"step {i} " + "of a long day " * 35, result="ok")
    payload = shaped(CLAUDE["SessionStart"], project(memd_daemon, "big"))

    default = hook(memd_daemon.socket_path, "session-start", "claude", payload)
    small = hook(memd_daemon.socket_path, "session-start", "claude", payload, "--max-chars", "600")

    context = json.loads(default.stdout)["hookSpecificOutput"]["additionalContext"]
    assert 9_000 < len(context) <= 10_000  # Claude Code's cap on injected context
    assert context.splitlines()[-1].startswith("… (") and "left out to stay within 10,000 characters" in context
    assert "Task: A task with a long memory" in context  # the most useful lines come first
    short = json.loads(small.stdout)["hookSpecificOutput"]["additionalContext"]
    assert len(short) <= 600 and short.startswith("# memd: memory of workspace big")


def test_a_memd_marker_file_names_the_projects_workspace(memd_daemon: RunningDaemon) -> None:
    payload = shaped(CLAUDE["SessionStart"], project(memd_daemon, "marked") / "src")

    done = hook(memd_daemon.socket_path, "session-start", "claude", payload)

    assert "memory of workspace marked" in json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]


# --- compaction, stop, session end -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "shape"),
    [("claude", CLAUDE["PreCompact"]), ("codex", CODEX["PreCompact"]), ("gemini", GEMINI["PreCompress"])],
)
def test_before_compaction_a_warm_entry_and_a_snapshot_are_taken(
    memd_daemon: RunningDaemon, host: str, shape: dict[str, Any]
) -> None:
    done = hook(memd_daemon.socket_path, "pre-compact", host, shaped(shape, project(memd_daemon, "alpha")))

    assert (done.returncode, done.stdout) == (0, ""), done.stderr
    last = entries(memd_daemon, "alpha")[-1]
    assert last["action"] == "context compaction"
    assert last["details"]["host"] == host and last["details"]["trigger"] == shape["trigger"]
    reasons = [c["reason"] for c in memd_daemon.call("history.list", workspace="alpha", limit=5)["commits"]]
    assert f"before {host} compaction" in reasons


@pytest.mark.parametrize(
    ("event", "host", "shape", "action", "result"),
    [
        ("stop", "claude", CLAUDE["Stop"], "agent turn ended", "I've completed the refactoring. Here's a summary..."),
        ("stop", "codex", CODEX["Stop"], "agent turn ended", "Done: the login test is fixed."),
        (
            "AfterAgent",
            "gemini",
            GEMINI["AfterAgent"],
            "agent turn ended",
            "Fixed: the token check compared the wrong clock.",
        ),
        ("session-end", "claude", CLAUDE["SessionEnd"], "session ended", None),
        ("SessionEnd", "gemini", GEMINI["SessionEnd"], "session ended", None),
    ],
)
def test_stop_and_session_end_log_and_snapshot(
    memd_daemon: RunningDaemon, event: str, host: str, shape: dict[str, Any], action: str, result: str | None
) -> None:
    done = hook(memd_daemon.socket_path, event, host, shaped(shape, project(memd_daemon, "alpha")))

    assert (done.returncode, done.stdout) == (0, ""), done.stderr
    last = entries(memd_daemon, "alpha")[-1]
    assert (last["action"], last.get("result")) == (action, result)
    assert last["details"]["host"] == host
    reasons = [c["reason"] for c in memd_daemon.call("history.list", workspace="alpha", limit=5)["commits"]]
    assert any(r.startswith(f"{host} ") for r in reasons)


@pytest.mark.parametrize(
    ("host", "shape", "name"),
    [("claude", CLAUDE["UserPromptSubmit"], "UserPromptSubmit"), ("gemini", GEMINI["BeforeAgent"], "BeforeAgent")],
)
def test_prompt_submit_adds_nothing_or_search_hits_in_the_hosts_format(
    memd_daemon: RunningDaemon, host: str, shape: dict[str, Any], name: str
) -> None:
    done = hook(memd_daemon.socket_path, "prompt-submit", host, shaped(shape, project(memd_daemon, "alpha")))

    assert done.returncode == 0, done.stderr
    if done.stdout:  # only where the daemon has memory.search
        answer = json.loads(done.stdout)
        assert answer["hookSpecificOutput"]["hookEventName"] == name
        assert len(answer["hookSpecificOutput"]["additionalContext"]) <= 2_000


# --- failing open ----------------------------------------------------------------------------------------------


def assert_failed_open(done: subprocess.CompletedProcess[str], elapsed: float, words: str) -> None:
    assert done.returncode == 0
    assert done.stdout == ""
    assert words in done.stderr, done.stderr
    assert elapsed < FAIL_OPEN_SECONDS


@pytest.mark.parametrize("event", ["session-start", "pre-compact", "stop", "session-end", "prompt-submit"])
def test_with_the_daemon_down_every_event_fails_open(tmp_path: Path, event: str) -> None:
    started = time.monotonic()
    done = hook(tmp_path / "no.sock", event, "claude", shaped(CLAUDE["SessionStart"], tmp_path))

    assert_failed_open(done, time.monotonic() - started, "memd is not running")


@pytest.mark.parametrize("payload", ["{not json", "[1, 2]", " " * ((1 << 20) + 10)], ids=["not-json", "array", "huge"])
def test_bad_input_fails_open(memd_daemon: RunningDaemon, payload: str) -> None:
    started = time.monotonic()
    done = hook(memd_daemon.socket_path, "session-start", "claude", payload)

    assert_failed_open(done, time.monotonic() - started, "memd hook session-start:")


def test_a_daemon_that_never_answers_is_given_up_on_within_the_deadline(tmp_path: Path) -> None:
    path = tmp_path / "stuck.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stuck:
        stuck.bind(str(path))
        stuck.listen(8)  # connections queue; nothing is ever read or answered
        started = time.monotonic()
        done = hook(path, "session-start", "claude", shaped(CLAUDE["SessionStart"], tmp_path), "--workspace", "x")

    assert_failed_open(done, time.monotonic() - started, "gave up after 2s")


def test_a_directory_without_a_workspace_fails_open_and_says_how_to_bind_one(
    memd_daemon: RunningDaemon, tmp_path: Path
) -> None:
    started = time.monotonic()
    done = hook(memd_daemon.socket_path, "session-start", "claude", shaped(CLAUDE["SessionStart"], tmp_path))

    assert_failed_open(done, time.monotonic() - started, "no memd workspace is bound to")


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["no-such-event", "--host", "claude"], "unknown event 'no-such-event'"),
        (["session-start", "--host", "claude", "--no-such-option"], "bad command line"),
        (["session-start", "--host", "vim"], "bad command line"),
    ],
)
def test_a_bad_command_line_fails_open(memd_daemon: RunningDaemon, argv: list[str], words: str) -> None:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "memd", "--socket", str(memd_daemon.socket_path), "hook", *argv],
        input="{}",
        capture_output=True,
        text=True,
        timeout=30,
    )

    assert_failed_open(done, time.monotonic() - started, words)
