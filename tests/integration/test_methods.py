"""Every protocol method of a real daemon, called over its real socket: results, their shapes, and the files.

One daemon serves the whole module (starting one per test would cost a second each). Each test that writes
gets a workspace of its own from a pool (`ws`); the workspaces that must exist on disk before the daemon
starts (an adopted recipe directory, a corrupt hot file, a hand-written MEMORY.md) are prepared first.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from harness import RunningDaemon, base_config, running_for_module

from memd.errors import MemdError

INVALID_PARAMS = -32602
CORRUPT_FILE = -32006
POOL_SIZE = 20

TODAY = datetime.now(UTC).date().isoformat()

# --- what exists on disk before the daemon starts ------------------------------------------------------------------

RECIPE_HOT = {
    "session_id": "sess-20260321-001",
    "task": "Refactor authentication module",
    "current_step": "Extracting JWT logic",
    "files_modified": ["auth/jwt.py", "auth/utils.py"],
    "decisions": [{"action": "Split jwt.py", "reason": "File exceeded 500 lines"}],
    "pending_actions": ["Add tests for jwt_utils.py"],
    "custom_field": {"keep": True},
}

RECIPE_WARM = [
    ("09:12:03", "Refactored JWT validation", {"file": "auth/jwt.py", "lines_changed": "45"}, "Tests passing"),
    ("09:40:51", "Ran test suite", {"command": "pytest tests/auth -q"}, "12 passed, 0 failed"),
]

RECIPE_MEMORY = """\
# Agent Memory

## Project Conventions
- [2026-03-01] Use snake_case for module names

## Gotchas
- [2026-03-10] The JWT library caches signing keys for 5 minutes
"""

# A MEMORY.md as a person writes it: prose, odd spacing, a code sample whose lines look like structure, a list
# of another kind, and no final newline.
PROSE_MEMORY = (
    "# Agent Memory\n"
    "\n"
    "Written by hand.  Two spaces here, trailing spaces there.   \n"
    "\n"
    "## Testing\n"
    "- [2026-01-02] Run pytest with -q\n"
    "\n"
    "A paragraph under the section, kept where it is.\n"
    "\n"
    "```markdown\n"
    "## Not a section\n"
    "- [2026-01-01] not a learning, only an example\n"
    "```\n"
    "\n"
    "## Style\n"
    "* a bullet of another kind\n"
    "\ttabbed line"
)


def recipe_log(day_file: Path, time: str, action: str, details: dict[str, str], result: str) -> None:
    """How the flat-file recipe appends to its day log: no header, no blank line between entries."""
    with day_file.open("a", encoding="utf-8") as f:
        f.write(f"### {time} - {action}\n```\n")
        for key, value in details.items():
            f.write(f"{key}: {value}\n")
        f.write(f"```\nResult: {result}\n")


def seed_adopted(path: Path) -> None:
    for tier in ("hot", "warm", "cold"):
        (path / tier).mkdir(parents=True)
    (path / "hot" / "context.json").write_text(json.dumps(RECIPE_HOT, indent=2), encoding="utf-8")
    for time, action, details, result in RECIPE_WARM:
        recipe_log(path / "warm" / f"{TODAY}.md", time, action, details, result)
    (path / "cold" / "MEMORY.md").write_text(RECIPE_MEMORY, encoding="utf-8")


def seed_corrupt(path: Path) -> None:
    (path / "hot").mkdir(parents=True)
    (path / "hot" / "context.json").write_bytes(b"{not json")


def seed_prose(path: Path) -> None:
    (path / "cold").mkdir(parents=True)
    (path / "cold" / "MEMORY.md").write_bytes(PROSE_MEMORY.encode("utf-8"))


# --- fixtures ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def memd() -> Iterator[RunningDaemon]:
    with tempfile.TemporaryDirectory(prefix="memd-") as d:
        root = Path(d) / "m"
        spaces = root / "ws"
        names = [f"ws{i:02d}" for i in range(POOL_SIZE)] + ["adopted", "corrupt", "prose", "tiny", "guarded"]
        config = base_config(root, workspaces={name: spaces / name for name in names})
        config["workspaces"]["tiny"]["budget"] = {"hot": 200, "warm": 100, "cold": 50, "model_window": 1000}
        config["workspaces"]["guarded"]["writers"] = [12345]
        config["workspaces"]["guarded"]["readers"] = [12345]
        seed_adopted(spaces / "adopted")
        seed_corrupt(spaces / "corrupt")
        seed_prose(spaces / "prose")
        with running_for_module(root, config) as daemon:
            yield daemon


@pytest.fixture(scope="module")
def unused_workspaces(memd: RunningDaemon) -> Iterator[str]:
    return iter(f"ws{i:02d}" for i in range(POOL_SIZE))


@pytest.fixture
def ws(unused_workspaces: Iterator[str]) -> str:
    """A workspace no other test has touched."""
    name = next(unused_workspaces, None)
    assert name is not None, "raise POOL_SIZE: every test that writes needs a fresh workspace"
    return name


# --- helpers -------------------------------------------------------------------------------------------------------


def assert_usage(usage: dict[str, Any]) -> None:
    """A usage breakdown: hot, warm and cold, each {tokens, budget, percent}."""
    assert set(usage) == {"hot", "warm", "cold"}
    for tier in usage.values():
        assert set(tier) == {"tokens", "budget", "percent"}
        assert isinstance(tier["tokens"], int) and tier["tokens"] >= 0
        assert isinstance(tier["budget"], int) and tier["budget"] > 0
        assert tier["percent"] == round(100.0 * tier["tokens"] / tier["budget"], 1)


def write(daemon: RunningDaemon, method: str, **params: Any) -> dict[str, Any]:
    """Call a write method; every write reports the workspace's usage against its budgets."""
    result = daemon.call(method, **params)
    assert_usage(result["usage"])
    return result


def error_of(daemon: RunningDaemon, method: str, **params: Any) -> MemdError:
    with pytest.raises(MemdError) as caught:
        daemon.call(method, **params)
    return caught.value


def entries(daemon: RunningDaemon, workspace: str) -> list[dict[str, Any]]:
    """Every recent warm entry, oldest first."""
    days = daemon.call("warm.recent", workspace=workspace)["days"]
    return [entry for day in reversed(days) for entry in day["entries"]]


def memory_md(daemon: RunningDaemon, workspace: str) -> str:
    return (daemon.workspace(workspace) / "cold" / "MEMORY.md").read_text(encoding="utf-8")


def own_hot_file(daemon: RunningDaemon, workspace: str) -> Path:
    return daemon.workspace(workspace) / "hot" / "memd.json"


def hot_file(daemon: RunningDaemon, workspace: str) -> Path:
    return daemon.workspace(workspace) / "hot" / "context.json"


# --- daemon-level methods ------------------------------------------------------------------------------------------


def test_ping_answers_pong_with_the_version(memd: RunningDaemon) -> None:
    result = memd.call("ping")

    assert result["pong"] is True
    assert isinstance(result["version"], str) and result["version"]


def test_status_reports_version_pid_and_every_workspace_with_its_usage(memd: RunningDaemon) -> None:
    status = memd.call("status")

    assert status["version"] == memd.call("ping")["version"]
    assert memd.proc is not None and status["pid"] == memd.proc.pid
    assert set(status["workspaces"]) == set(memd.config["workspaces"])
    for name, workspace in status["workspaces"].items():
        assert workspace["path"] == memd.config["workspaces"][name]["path"]
        assert_usage(workspace["usage"])
    assert status["workspaces"]["tiny"]["usage"]["hot"]["budget"] == 200


def test_workspace_list_names_every_workspace_sorted_with_path_and_usage(memd: RunningDaemon) -> None:
    listed = memd.call("workspace.list")["workspaces"]

    assert [w["name"] for w in listed] == sorted(memd.config["workspaces"])
    for workspace in listed:
        assert workspace["path"] == memd.config["workspaces"][workspace["name"]]["path"]
        assert_usage(workspace["usage"])


# --- session.start -------------------------------------------------------------------------------------------------


def test_session_start_generates_a_session_id_when_none_is_given(memd: RunningDaemon, ws: str) -> None:
    result = write(memd, "session.start", workspace=ws, task="Write the parser")

    assert re.fullmatch(r"sess-[0-9]{8}-[0-9]{6}-[0-9a-f]{4}", result["session_id"])
    assert result["resumed"] is False
    assert "previous" not in result
    assert result["task"] == "Write the parser"
    hot = memd.call("hot.get", workspace=ws)["hot"]
    assert hot["session_id"] == result["session_id"]
    assert hot["task"] == "Write the parser"


def test_session_start_uses_the_session_id_it_is_given(memd: RunningDaemon, ws: str) -> None:
    result = write(memd, "session.start", workspace=ws, task="Write the lexer", session_id="agent-7-run-3")

    assert result["session_id"] == "agent-7-run-3"
    assert memd.call("hot.get", workspace=ws)["hot"]["session_id"] == "agent-7-run-3"


def test_session_start_with_the_same_task_resumes_and_keeps_step_and_pending(memd: RunningDaemon, ws: str) -> None:
    write(memd, "session.start", workspace=ws, task="Migrate the database")
    write(memd, "progress.update", workspace=ws, step="Copying rows", pending_add=["Drop old table"])

    result = write(memd, "session.start", workspace=ws, task="Migrate the database")

    assert result["resumed"] is True
    assert "previous" not in result
    assert result["current_step"] == "Copying rows"
    assert result["pending_actions"] == ["Drop old table"]
    assert entries(memd, ws)[-1]["action"] == "session-resume"


def test_session_start_with_another_task_starts_fresh_and_returns_the_previous_one(
    memd: RunningDaemon, ws: str
) -> None:
    first = write(memd, "session.start", workspace=ws, task="Migrate the database")
    write(memd, "progress.update", workspace=ws, step="Copying rows", files=["db.py"], pending_add=["Drop old table"])

    result = write(memd, "session.start", workspace=ws, task="Fix the login page")

    assert result["resumed"] is False
    assert result["task"] == "Fix the login page"
    assert (result["current_step"], result["pending_actions"], result["files_modified"]) == ("", [], [])
    assert result["previous"] == {
        "session_id": first["session_id"],
        "task": "Migrate the database",
        "current_step": "Copying rows",
        "pending_actions": ["Drop old table"],
        "files_modified": ["db.py"],
    }
    start = entries(memd, ws)[-1]
    assert start["action"] == "session-start"
    assert start["details"]["previous_task"] == "Migrate the database"


def test_the_resume_packet_holds_everything_an_agent_needs_to_continue(memd: RunningDaemon, ws: str) -> None:
    write(memd, "cold.learn", workspace=ws, category="Auth", learning="Rotate JWT signing keys monthly")
    write(memd, "cold.learn", workspace=ws, category="Docker", learning="Images are built with buildx")
    write(memd, "session.start", workspace=ws, task="Fix the auth token refresh")
    write(memd, "progress.update", workspace=ws, step="Reading refresh.py", files=["auth/refresh.py"])
    write(memd, "progress.update", workspace=ws, pending_add=["Add a regression test"])
    write(memd, "decision.record", workspace=ws, action="Keep the old endpoint", reason="Mobile clients use it")
    write(memd, "warm.log", workspace=ws, action="ran unit tests", result="3 failed")

    packet = write(memd, "session.start", workspace=ws, task="Fix the auth token refresh")

    assert packet["resumed"] is True
    assert packet["task"] == "Fix the auth token refresh"
    assert packet["current_step"] == "Reading refresh.py"
    assert packet["pending_actions"] == ["Add a regression test"]
    assert packet["files_modified"] == ["auth/refresh.py"]
    assert [d["action"] for d in packet["recent_decisions"]] == ["Keep the old endpoint"]
    assert packet["relevant_learnings"] == [
        {"category": "Auth", "date": TODAY, "text": "Rotate JWT signing keys monthly"}
    ]
    activity = [a["action"] for a in packet["recent_activity"]]  # newest first
    assert activity[:3] == ["session-resume", "ran unit tests", "decision: Keep the old endpoint"]
    assert all(a["date"] == TODAY and re.fullmatch(r"\d\d:\d\d:\d\d", a["time"]) for a in packet["recent_activity"])
    assert "Fix the auth token refresh" in packet["context"]["text"]
    assert_usage(packet["context"]["usage"])


def test_the_resume_packet_learnings_follow_the_topic_when_one_is_given(memd: RunningDaemon, ws: str) -> None:
    write(memd, "cold.learn", workspace=ws, category="Auth", learning="Rotate JWT signing keys monthly")
    write(memd, "cold.learn", workspace=ws, category="Docker", learning="Images are built with buildx")

    packet = write(memd, "session.start", workspace=ws, task="Fix the auth token refresh", topic="docker")

    assert [lr["text"] for lr in packet["relevant_learnings"]] == ["Images are built with buildx"]


# --- hot tier ------------------------------------------------------------------------------------------------------


def test_progress_update_sets_the_step_deduplicates_files_and_tracks_pending_actions(
    memd: RunningDaemon, ws: str
) -> None:
    first = write(
        memd,
        "progress.update",
        workspace=ws,
        step="Writing tests",
        files=["a.py", "b.py", "a.py"],
        pending_add=["write docs", "add tests", "write docs"],
    )
    assert first["current_step"] == "Writing tests"
    assert first["files_modified"] == ["a.py", "b.py"]
    assert first["pending_actions"] == ["write docs", "add tests"]
    assert first["not_pending"] == []

    second = write(memd, "progress.update", workspace=ws, files=["b.py", "c.py"], pending_done=["write docs", "deploy"])

    assert second["current_step"] == "Writing tests"  # not given: unchanged
    assert second["files_modified"] == ["a.py", "b.py", "c.py"]
    assert second["pending_actions"] == ["add tests"]
    assert second["not_pending"] == ["deploy"]
    hot = memd.call("hot.get", workspace=ws)["hot"]
    assert (hot["files_modified"], hot["pending_actions"]) == (["a.py", "b.py", "c.py"], ["add tests"])


def test_a_decision_is_kept_in_hot_and_logged_in_warm(memd: RunningDaemon, ws: str) -> None:
    result = write(
        memd, "decision.record", workspace=ws, action="Split jwt.py", reason="File exceeded 500 lines", risk="low"
    )
    plain = write(memd, "decision.record", workspace=ws, action="Keep tokens opaque", reason="Simpler clients")

    decision = result["decision"]
    assert {k: decision[k] for k in ("action", "reason", "risk")} == {
        "action": "Split jwt.py",
        "reason": "File exceeded 500 lines",
        "risk": "low",
    }
    assert decision["id"] and decision["id"] != plain["decision"]["id"]
    assert datetime.fromisoformat(decision["ts"]).tzinfo is not None
    assert "risk" not in plain["decision"]
    assert memd.call("hot.get", workspace=ws)["hot"]["decisions"] == [decision, plain["decision"]]
    logged = entries(memd, ws)
    assert [(e["action"], e["details"]) for e in logged] == [
        ("decision: Split jwt.py", {"reason": "File exceeded 500 lines", "risk": "low"}),
        ("decision: Keep tokens opaque", {"reason": "Simpler clients"}),
    ]


def test_a_hot_note_is_stored_and_rendered(memd: RunningDaemon, ws: str) -> None:
    note = write(memd, "hot.note", workspace=ws, text="The staging DB is read-only until Friday")["note"]

    assert note["text"] == "The staging DB is read-only until Friday"
    assert note["id"] and datetime.fromisoformat(note["ts"]).tzinfo is not None
    got = memd.call("hot.get", workspace=ws)
    assert got["hot"]["notes"] == [note]
    assert "## Notes\n" in got["rendered"]
    assert "The staging DB is read-only until Friday" in got["rendered"]
    assert "error" not in got
    assert_usage(got["usage"])
    assert json.loads(own_hot_file(memd, ws).read_text())["notes"] == [note]  # memd's own keys: hot/memd.json


# --- warm tier -----------------------------------------------------------------------------------------------------


def test_a_warm_entry_reads_back_with_scalar_details_as_strings(memd: RunningDaemon, ws: str) -> None:
    details = {"file": "src/app.py", "count": 3, "ratio": 0.5, "ok": True, "flaky": False, "owner": None}

    entry = write(memd, "warm.log", workspace=ws, action="ran tests", details=details, result="all green")["entry"]

    as_text = {"file": "src/app.py", "count": "3", "ratio": "0.5", "ok": "true", "flaky": "false", "owner": "null"}
    assert entry["details"] == as_text
    assert (entry["date"], entry["action"], entry["result"]) == (TODAY, "ran tests", "all green")
    days = memd.call("warm.recent", workspace=ws)["days"]
    assert [d["date"] for d in days] == [TODAY]
    assert days[0]["entries"] == [entry]


def test_a_warm_entry_without_details_or_result_has_neither(memd: RunningDaemon, ws: str) -> None:
    entry = write(memd, "warm.log", workspace=ws, action="opened the editor")["entry"]

    assert entry["details"] == {}
    assert "result" not in entry
    assert entries(memd, ws) == [entry]


@pytest.mark.parametrize("days", [0, -1, 3661, "2", 1.5, True])
def test_warm_recent_days_must_be_an_integer_in_range(memd: RunningDaemon, days: Any) -> None:
    error = error_of(memd, "warm.recent", workspace="ws00", days=days)

    assert error.code == INVALID_PARAMS
    assert "days" in error.message


def test_warm_recent_accepts_the_range_bounds(memd: RunningDaemon) -> None:
    for days in (1, 3660):
        assert isinstance(memd.call("warm.recent", workspace="ws00", days=days)["days"], list)


# --- cold tier -----------------------------------------------------------------------------------------------------


def test_a_learning_goes_first_under_its_category_and_a_new_category_is_appended(memd: RunningDaemon, ws: str) -> None:
    first = write(memd, "cold.learn", workspace=ws, category="Testing", learning="Use tmp_path for files")
    write(memd, "cold.learn", workspace=ws, category="Testing", learning="Poll with a bounded deadline")
    write(memd, "cold.learn", workspace=ws, category="Deploy", learning="Tag releases before pushing")

    assert first["learning"] == {"category": "Testing", "date": TODAY, "text": "Use tmp_path for files"}
    assert memory_md(memd, ws) == (
        "# Agent Memory\n"
        "\n"
        "## Testing\n"
        f"- [{TODAY}] Poll with a bounded deadline\n"
        f"- [{TODAY}] Use tmp_path for files\n"
        "\n"
        "## Deploy\n"
        f"- [{TODAY}] Tag releases before pushing\n"
    )


def test_cold_get_with_a_topic_returns_only_matching_learnings_case_insensitively(memd: RunningDaemon, ws: str) -> None:
    write(memd, "cold.learn", workspace=ws, category="Testing", learning="Use tmp_path for files")
    write(memd, "cold.learn", workspace=ws, category="Deploy", learning="Tag releases before pushing")
    write(memd, "cold.learn", workspace=ws, category="Style", learning="Docstrings say why, for TESTING too")

    testing = memd.call("cold.get", workspace=ws, topic="TESTING")
    deploy = memd.call("cold.get", workspace=ws, topic="deploy")
    everything = memd.call("cold.get", workspace=ws)

    assert [lr["text"] for lr in testing["learnings"]] == [  # category matches rank above text matches
        "Use tmp_path for files",
        "Docstrings say why, for TESTING too",
    ]
    assert deploy["learnings"] == [{"category": "Deploy", "date": TODAY, "text": "Tag releases before pushing"}]
    assert len(everything["learnings"]) == 3
    assert everything["omitted"] == 0
    assert "# Relevant Learnings" in deploy["text"] and "Tag releases before pushing" in deploy["text"]
    assert_usage(deploy["usage"])


def test_learning_into_a_hand_written_memory_file_keeps_every_other_byte(memd: RunningDaemon) -> None:
    write(memd, "cold.learn", workspace="prose", category="Testing", learning="Always bound a wait")
    write(memd, "cold.learn", workspace="prose", category="Not a section", learning="Fenced headings are prose")

    expected = (
        PROSE_MEMORY.replace("## Testing\n", f"## Testing\n- [{TODAY}] Always bound a wait\n", 1)
        + f"\n\n## Not a section\n- [{TODAY}] Fenced headings are prose\n"
    )
    assert memory_md(memd, "prose") == expected
    learnings = memd.call("cold.get", workspace="prose")["learnings"]
    assert sorted((lr["category"], lr["text"]) for lr in learnings) == [
        ("Not a section", "Fenced headings are prose"),
        ("Testing", "Always bound a wait"),
        ("Testing", "Run pytest with -q"),
    ]


# --- context.get ---------------------------------------------------------------------------------------------------


def test_the_context_holds_the_hot_header_recent_activity_and_relevant_learnings(memd: RunningDaemon, ws: str) -> None:
    write(memd, "session.start", workspace=ws, task="Build the context payload")
    write(memd, "progress.update", workspace=ws, step="Trimming to budget", pending_add=["Measure tokens"])
    write(memd, "warm.log", workspace=ws, action="ran the linter", result="clean")
    write(memd, "cold.learn", workspace=ws, category="Linting", learning="ruff is configured for 120 columns")
    write(memd, "cold.learn", workspace=ws, category="Cooking", learning="Salt the pasta water")

    context = memd.call("context.get", workspace=ws, topic="linting")

    text = context["text"]
    assert text.startswith("# Current Session\n")
    for expected in ("Task: Build the context payload", "Current step: Trimming to budget", "Measure tokens"):
        assert expected in text
    assert f"## Activity {TODAY}" in text and "ran the linter" in text and "Result: clean" in text
    assert "# Relevant Learnings" in text and "ruff is configured for 120 columns" in text
    assert "Salt the pasta water" not in text
    assert set(context["usage"]) == {"hot", "warm", "cold"}
    assert all(tier["tokens"] > 0 for tier in context["usage"].values())
    assert context["model_window"] == 200_000


def test_the_context_stays_within_tiny_budgets_and_leaves_the_oldest_notes_out(memd: RunningDaemon) -> None:
    write(memd, "session.start", workspace="tiny", task="Tune the cache")
    for i in range(1, 13):
        write(memd, "hot.note", workspace="tiny", text=f"note {i:02d}: the cache misses on cold start, case {i}")
    for i in range(1, 11):
        write(memd, "warm.log", workspace="tiny", action=f"measured run {i:02d}", details={"hit_rate": i / 10})
    for i in range(1, 7):
        write(memd, "cold.learn", workspace="tiny", category="Cache", learning=f"cache lesson {i:02d} worth keeping")

    context = memd.call("context.get", workspace="tiny")

    budgets = {"hot": 200, "warm": 100, "cold": 50}
    for tier, budget in budgets.items():
        assert context["usage"][tier]["budget"] == budget
        assert 0 < context["usage"][tier]["tokens"] <= budget, tier
    # Whether context.get trimmed them or a checkpoint already compacted them into the summary, the notes left
    # out are the oldest ones.
    notes_section = context["text"].partition("## Notes\n")[2].partition("\n#")[0]  # not the summary's bullets
    notes_kept = [int(n) for n in re.findall(r"note (\d\d):", notes_section)]
    if notes_kept:
        assert notes_kept == list(range(notes_kept[0], 13)), "only the oldest notes are left out"
        assert notes_kept[0] > 1
    else:  # an automatic checkpoint already compacted every note into the summary
        assert "# Context Summary" in context["text"]
    assert "Task: Tune the cache" in context["text"]  # the pinned header stays
    assert context["included"]["warm"] >= 1
    assert "measured run 01" not in context["text"]  # the oldest activity is the first to go
    assert "cache lesson 06" in context["text"]  # the newest learning comes first (no topic)
    assert "cache lesson 01" not in context["text"]


# --- adoption, corruption, injection, access -----------------------------------------------------------------------


def test_an_existing_recipe_directory_is_adopted_as_it_is(memd: RunningDaemon) -> None:
    got = memd.call("hot.get", workspace="adopted")

    assert got["hot"] == RECIPE_HOT
    for shown in ("Refactor authentication module", "Extracting JWT logic", "auth/utils.py", "Split jwt.py"):
        assert shown in got["rendered"]
    assert [(e["time"], e["action"], e["details"], e["result"]) for e in entries(memd, "adopted")] == [
        (time, action, details, result) for time, action, details, result in RECIPE_WARM
    ]
    assert all("extra" not in e for e in entries(memd, "adopted"))
    learnings = memd.call("cold.get", workspace="adopted")["learnings"]
    assert {(lr["category"], lr["date"]) for lr in learnings} == {
        ("Project Conventions", "2026-03-01"),
        ("Gotchas", "2026-03-10"),
    }


def test_writing_to_an_adopted_directory_keeps_the_recipe_fields_and_unknown_ones(memd: RunningDaemon) -> None:
    day_file = memd.workspace("adopted") / "warm" / f"{TODAY}.md"
    foreign_log = day_file.read_bytes()

    note = write(memd, "hot.note", workspace="adopted", text="Remember the refresh-token edge case")["note"]
    write(memd, "warm.log", workspace="adopted", action="added a note", details={"by": "memd"})

    on_disk = json.loads(hot_file(memd, "adopted").read_text())
    assert on_disk == RECIPE_HOT  # the recipe's file holds the recipe's fields, and nothing memd added
    assert json.loads(own_hot_file(memd, "adopted").read_text())["notes"] == [note]
    assert day_file.read_bytes().startswith(foreign_log)
    assert [e["action"] for e in entries(memd, "adopted")] == [
        "Refactored JWT validation",
        "Ran test suite",
        "added a note",
    ]
    resumed = write(memd, "session.start", workspace="adopted", task="Refactor authentication module")
    assert resumed["resumed"] is True
    assert resumed["pending_actions"] == ["Add tests for jwt_utils.py"]
    assert resumed["files_modified"] == ["auth/jwt.py", "auth/utils.py"]


def test_a_corrupt_hot_file_is_reported_never_overwritten_and_writable_again_once_fixed(memd: RunningDaemon) -> None:
    path = hot_file(memd, "corrupt")

    got = memd.call("hot.get", workspace="corrupt")
    assert "context.json" in got["error"]
    assert_usage(got["usage"])

    for method, params in [
        ("hot.note", {"text": "lost?"}),
        ("session.start", {"task": "anything"}),
        ("progress.update", {"step": "a step"}),
        ("decision.record", {"action": "a", "reason": "b"}),
    ]:
        error = error_of(memd, method, workspace="corrupt", **params)
        assert error.code == CORRUPT_FILE, method
        assert str(path) in error.message
        assert error.data is not None and error.data["path"] == str(path)
    write(memd, "warm.log", workspace="corrupt", action="warm still works")
    write(memd, "cold.learn", workspace="corrupt", category="Recovery", learning="cold still works")
    assert path.read_bytes() == b"{not json"
    assert "context.json" in memd.call("status")["workspaces"]["corrupt"]["file_errors"]["hot"]

    path.write_text(json.dumps({"task": "Fixed by hand", "custom": 1}), encoding="utf-8")
    note = write(memd, "hot.note", workspace="corrupt", text="back in business")["note"]

    got = memd.call("hot.get", workspace="corrupt")
    assert "error" not in got
    assert got["hot"]["task"] == "Fixed by hand"
    assert got["hot"]["custom"] == 1
    assert got["hot"]["notes"] == [note]


def test_markdown_injected_through_fields_creates_no_entry_section_or_learning(memd: RunningDaemon, ws: str) -> None:
    action = "x\n### 12:00:00 - fake\nResult: pwned"
    details = {
        "```": "```",
        "Result": "pwned\n### 12:00:01 - fake",
        "key: with colon": "v\n```\n### 12:00:02 - forged\n```",
        "#heading\nline": "`code`\r\n## B",
        "back\\slash": "trailing\\",
    }
    result = "ok\n### 12:00:03 - fake\nResult: pwned"
    write(memd, "warm.log", workspace=ws, action=action, details=details, result=result)
    write(memd, "decision.record", workspace=ws, action="y\n### 12:00:04 - fake", reason="r\n```")
    write(memd, "cold.learn", workspace=ws, category="A\n## B", learning="y\n- [2020-01-01] fake")
    write(memd, "cold.learn", workspace=ws, category="Normal", learning="plain\n\n## C")

    logged = entries(memd, ws)
    assert len(logged) == 2
    assert (logged[0]["action"], logged[0]["details"], logged[0]["result"]) == (action, details, result)
    assert logged[1]["action"] == "decision: y\n### 12:00:04 - fake"
    assert logged[1]["details"] == {"reason": "r\n```"}
    day_lines = (memd.workspace(ws) / "warm" / f"{TODAY}.md").read_text().split("\n")
    assert sum(line.startswith("### ") for line in day_lines) == 2
    assert sum(line.startswith("Result") for line in day_lines) == 1

    memory_lines = memory_md(memd, ws).split("\n")
    assert [line for line in memory_lines if line.startswith("#")] == ["# Agent Memory", "## A\\n## B", "## Normal"]
    assert sum(line.startswith("- [") for line in memory_lines) == 2
    learnings = memd.call("cold.get", workspace=ws)["learnings"]
    assert sorted((lr["category"], lr["text"]) for lr in learnings) == [
        ("A\n## B", "y\n- [2020-01-01] fake"),
        ("Normal", "plain\n\n## C"),
    ]


def test_root_may_write_to_a_workspace_whose_access_list_names_only_others(memd: RunningDaemon) -> None:
    write(memd, "hot.note", workspace="guarded", text="root is always allowed")
    write(memd, "warm.log", workspace="guarded", action="root logged this")

    assert memd.call("hot.get", workspace="guarded")["hot"]["notes"][0]["text"] == "root is always allowed"
    assert [e["action"] for e in entries(memd, "guarded")] == ["root logged this"]
