"""A real daemon answers over its real socket and writes durable, readable files."""

from __future__ import annotations

from harness import RunningDaemon


def test_a_logged_action_is_on_disk_when_acknowledged(daemon: RunningDaemon) -> None:
    result = daemon.call("warm.log", workspace="alpha", action="ran tests", details={"file": "a.py"}, result="ok")
    assert result["entry"]["action"] == "ran tests"
    day_file = daemon.workspace("alpha") / "warm" / f"{result['entry']['date']}.md"
    text = day_file.read_text()
    assert "- ran tests\n```\nfile: a.py\n```\nResult: ok\n" in text
    assert set(result["usage"]) == {"hot", "warm", "cold"}


def test_sigterm_exits_cleanly_and_removes_the_socket(daemon: RunningDaemon) -> None:
    assert daemon.stop() == 0
    assert not daemon.socket_path.exists()
