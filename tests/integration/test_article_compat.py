"""Agent code written after the tiered-memory article and memd on the same files, both ways, with a real daemon.

The article's own classes (tests/fixtures/article_memory.py) load a workspace memd manages after every kind of
write memd makes, and memd serves and writes a tree the article's code made, which the article's code then still
loads. Both run as if on a machine in Asia/Kolkata (UTC+05:30, far from the test's UTC): the daemon takes its
zone from $TZ, the article's code stamps local time, and both must land in the same day files.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from fixtures.article_memory import ColdMemory, HotMemory, WarmMemory
from harness import RunningDaemon, base_config, wait_for

from memd.tiers import hot_format

ZONE = "Asia/Kolkata"
MakeDaemon = Callable[..., RunningDaemon]


def local_now() -> datetime:
    """What `datetime.now()` gives the article's code on a machine in ZONE."""
    return datetime.now(ZoneInfo(ZONE)).replace(tzinfo=None)


def start(make_daemon: MakeDaemon, workspace: Path, **sections: Any) -> RunningDaemon:
    root = workspace.parent.parent / "daemon"
    config = base_config(root, {"alpha": workspace}, **sections)
    return make_daemon("article", config=config, env={"TZ": ZONE})


def article_loads(base: Path, memd: RunningDaemon) -> HotMemory:
    """The article's code loads every tier of the workspace, and reads there what memd serves."""
    hot = HotMemory.load(base)  # HotMemory(**json.load(f)): fails on any key that is not one of its fields
    served = memd.call("hot.get", workspace="alpha")["hot"]
    assert (hot.session_id, hot.task, hot.current_step) == (
        served["session_id"],
        served["task"],
        served["current_step"],
    )
    assert (hot.files_modified, hot.decisions, hot.pending_actions) == (
        served["files_modified"],
        served["decisions"],
        served["pending_actions"],
    )
    assert set(json.loads((base / "hot" / "context.json").read_bytes())) == set(hot_format.ARTICLE_KEYS)

    warm = WarmMemory(base, local_now)
    today = local_now().date()
    entries = memd.call("warm.day", workspace="alpha", date=today.isoformat())["entries"]
    assert warm.actions(today) == [(e["time"], e["action"].split("\n")[0]) for e in entries]
    assert all(f"### {e['time']} - " in warm.load_recent() for e in entries)

    cold = ColdMemory(base, local_now).load()
    learnings = memd.call("cold.get", workspace="alpha")["learnings"]
    assert sorted((c, t) for c, texts in cold.items() for t in texts) == sorted(
        (lr["category"], lr["text"]) for lr in learnings
    )
    return hot


# --- memd's files, loaded by the article's code after every kind of memd write ------------------------------------


def test_the_articles_code_loads_memds_files_after_every_kind_of_write(make_daemon: MakeDaemon, tmp_path: Path) -> None:
    base = tmp_path / "ws" / "alpha"
    memd = start(make_daemon, base, budget={"hot": 2000})
    writes: list[tuple[str, dict[str, Any]]] = [
        ("session.start", {"task": "Refactor the parser"}),
        ("progress.update", {"step": "Tokenizer", "files": ["src/lex.py"], "pending_add": ["tests", "docs"]}),
        ("progress.update", {"pending_done": ["docs"]}),
        *(("decision.record", {"action": f"choice {i}", "reason": "measured", "risk": "low"}) for i in range(6)),
        ("decision.record", {"action": "no risk given", "reason": "r"}),
        *(("hot.note", {"text": f"note {i}: " + "context " * 30}) for i in range(12)),
        (
            "warm.log",
            {
                "action": "Ran the tests",
                "details": {"cmd": "pytest -x", "out": "2 failed\nC:\\repo"},
                "result": "2 failed\nsee out",
            },
        ),
        ("warm.log", {"action": "two\nline action"}),
        ("cold.learn", {"category": "Testing", "learning": "run pytest with -x"}),
        ("cold.learn", {"category": "Parser", "learning": "tokens carry their offsets"}),
        ("checkpoint.run", {"force": True}),
    ]
    for method, params in writes:
        memd.call(method, workspace="alpha", **params)
        article_loads(base, memd)

    record = memd.call("checkpoint.list", workspace="alpha")["checkpoints"][-1]
    assert json.loads((base / "hot" / "memd.json").read_bytes())["checkpoints"][-1]["id"] == record["id"]
    memd.call("checkpoint.undo", workspace="alpha", id=record["id"])
    article_loads(base, memd)

    first = memd.call("history.list", workspace="alpha", limit=200)["commits"][-1]["rev"]
    memd.call("snapshot.restore", workspace="alpha", rev=first, paths=["hot"])
    article_loads(base, memd)

    memd.call("retention.sweep", workspace="alpha")
    memd.call("session.start", workspace="alpha", task="Another task")  # a new task resets the session
    hot = article_loads(base, memd)
    assert (hot.task, hot.decisions) == ("Another task", [])


# --- a tree the article's code made, served and written by memd, still loaded by the article's code --------------


def test_memd_serves_and_writes_a_tree_the_articles_code_made_which_the_article_then_still_loads(
    make_daemon: MakeDaemon, tmp_path: Path
) -> None:
    base = tmp_path / "ws" / "alpha"
    now = local_now()
    old = WarmMemory(base, lambda: now - timedelta(days=30))
    old.log("Set up the project", {"repo": "git@example.org:acme/api.git"}, "done")
    WarmMemory(base, lambda: now - timedelta(days=10)).log("Chose the framework", {"why": "async"}, "FastAPI")
    hot = HotMemory("sess-1", "Build the API", "Routing", ["app/routes.py"], pending_actions=["auth", "tests"])
    hot.add_decision("Use FastAPI", "async and typed")
    hot.save(base)
    WarmMemory(base, local_now).log("Wrote the routes", {"file": "app/routes.py", "win": "C:\\new\\app"}, "ok")
    ColdMemory(base, local_now).add_learning("API", "version every route")

    memd = start(make_daemon, base)

    # memd reads the article's files as they are ...
    served = memd.call("hot.get", workspace="alpha")["hot"]
    assert (served["task"], served["decisions"], served["pending_actions"]) == (
        "Build the API",
        [{"action": "Use FastAPI", "reason": "async and typed", "risk": "low"}],
        ["auth", "tests"],
    )
    today = local_now().date().isoformat()
    (written,) = memd.call("warm.day", workspace="alpha", date=today)["entries"]
    assert (written["action"], written["details"]) == (
        "Wrote the routes",
        {"file": "app/routes.py", "win": "C:\\new\\app"},
    )
    # ... and writes into them: every tier, the article's code loading them after each write.
    memd.call("session.start", workspace="alpha")  # same task: a resume
    article_loads(base, memd)
    memd.call("progress.update", workspace="alpha", step="Auth", files=["app/auth.py"], pending_done=["auth"])
    memd.call("decision.record", workspace="alpha", action="JWT", reason="stateless", risk="medium")
    memd.call("hot.note", workspace="alpha", text="the auth middleware wraps every route")
    entry = memd.call("warm.log", workspace="alpha", action="Added auth", details={"file": "app/auth.py"})["entry"]
    memd.call("cold.learn", workspace="alpha", category="API", learning="401 before 403")
    hot_now = article_loads(base, memd)
    assert (hot_now.current_step, hot_now.pending_actions) == ("Auth", ["tests"])
    assert entry["date"] == today  # memd's day is the article's day: both in the machine's zone
    day_file = base / "warm" / f"{today}.md"
    assert f"(UTC+05:30, {ZONE})" in day_file.read_text(encoding="utf-8")  # the zone, before memd's first entry

    # The article's code keeps working on the same files, and memd adopts what it writes.
    hot_now.current_step = "Tests"
    hot_now.add_decision("pytest", "the team knows it")
    hot_now.save(base)  # rewrites context.json with its six fields only: memd's notes live in hot/memd.json
    WarmMemory(base, local_now).log("Ran the tests", {"cmd": "pytest"}, "green")
    ColdMemory(base, local_now).add_learning("Testing", "fixtures over mocks")

    def adopted() -> dict[str, Any] | None:
        hot_doc: dict[str, Any] = memd.call("hot.get", workspace="alpha")["hot"]
        return hot_doc if hot_doc["current_step"] == "Tests" else None

    served = wait_for(adopted, "memd to adopt the article's save")
    assert [n["text"] for n in served["notes"]] == ["the auth middleware wraps every route"]
    assert [d["action"] for d in served["decisions"]] == ["Use FastAPI", "JWT", "pytest"]
    actions = [e["action"] for e in memd.call("warm.day", workspace="alpha", date=today)["entries"]]
    assert actions == ["Wrote the routes", "session-resume", "decision: JWT", "Added auth", "Ran the tests"]
    memd.call("hot.note", workspace="alpha", text="after the article's save")
    article_loads(base, memd)

    # Its old day files stay until a person has seen what retention would remove, and confirms.
    old_days = [base / "warm" / f"{(now - timedelta(days=n)).date().isoformat()}.md" for n in (30, 10)]
    (held,) = memd.call("retention.sweep", workspace="alpha")["results"]
    assert held["held"] and held["removed"] == [] and held["expired"] == [p.name for p in old_days]
    assert "--confirm" in held["confirm"]
    assert all(p.exists() for p in old_days)
    (swept,) = memd.call("retention.sweep", workspace="alpha", confirm=True)["results"]
    assert swept["removed"] == [p.name for p in old_days] and not swept.get("held")
    assert not any(p.exists() for p in old_days)
    article_loads(base, memd)


# --- a workspace from before the split: migrated on start, after a commit of what it was ---------------------------


def test_a_workspace_from_before_the_split_is_migrated_on_start_after_a_commit_that_undoes_it(
    make_daemon: MakeDaemon, tmp_path: Path
) -> None:
    base = tmp_path / "ws" / "alpha"
    (base / "hot").mkdir(parents=True)
    legacy = {
        "version": 1,
        "session_id": "s",
        "task": "t",
        "current_step": "c",
        "files_modified": [],
        "decisions": [],
        "pending_actions": [],
        "notes": [{"id": "n-20240101000000-abcdef", "ts": "2024-01-01T00:00:00+00:00", "text": "kept"}],
        "summary": "",
        "checkpoints": [],
    }
    legacy_bytes = json.dumps(legacy, indent=2).encode()
    (base / "hot" / "context.json").write_bytes(legacy_bytes)
    with pytest.raises(TypeError):
        HotMemory.load(base)  # what the issue reported: the article's loader refuses memd's keys

    memd = start(make_daemon, base)

    # Both files' replaces are published one after the other (memd.json first: see HotStore.writes_for).
    wait_for(lambda: "version" not in json.loads((base / "hot" / "context.json").read_bytes()), "the split")
    hot = article_loads(base, memd)
    assert hot.task == "t"
    own = json.loads((base / "hot" / "memd.json").read_bytes())
    assert own["notes"] == legacy["notes"] and own["version"] == 2
    commits = memd.call("history.list", workspace="alpha", limit=20)["commits"]
    before = next(c for c in commits if c["reason"] == "before hot split")
    git = ["git", "--git-dir", str(base / ".git"), "show", f"{before['rev']}:hot/context.json"]
    assert subprocess.run(git, capture_output=True, check=True).stdout == legacy_bytes  # reversible by commit
