"""`memory.search`, `memory.reindex` and `memd search` against the real daemon: hits from every tier with their
locations, a write visible to the next search, an outside edit adopted into the index, a rebuild that equals what
the increments built, hostile queries answered, access per hit, and the index as derived state in the state dir.

One daemon serves most of the module; workspaces that must exist before it starts are written first.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from harness import RunningDaemon, base_config, running_for_module, wait_for

from memd import archive
from memd.errors import ACCESS_DENIED, INVALID_PARAMS, MemdError
from memd.tiers import warm_format
from memd.tiers.warm_format import WarmEntry

OTHER = 65535  # a uid allowed on the socket, listed as a reader of "ruled" only
TODAY = datetime.now(UTC).date()
OLD = TODAY - timedelta(days=40)

MEMORY = "# Agent Memory\n\n## Auth\n- [2025-11-02] JWT secrets live in vault\n"


def day_text(day: date, *entries: WarmEntry) -> str:
    return f"# Activity Log {day.isoformat()}\n\n" + "".join(warm_format.render_entry(e) for e in entries)


def prepare(root: Path) -> dict[str, Path]:
    spaces = {name: root / "ws" / name for name in ("alpha", "beta", "ruled", "ranked")}
    alpha = spaces["alpha"]
    for tier in ("hot", "warm", "cold"):
        (alpha / tier).mkdir(parents=True)
    (alpha / "cold" / "MEMORY.md").write_text(MEMORY, encoding="utf-8")
    old = alpha / "warm" / f"{OLD.isoformat()}.md"
    old.write_text(day_text(OLD, WarmEntry("08:00:00", "Migrated the billing schema", (), "done")), encoding="utf-8")
    archive.add_to_month(alpha / "warm" / "archive", OLD.isoformat()[:7], [(old.name, old.read_bytes())], 64 << 20)
    old.unlink()
    return spaces


@pytest.fixture(scope="module")
def d() -> Iterator[RunningDaemon]:
    with tempfile.TemporaryDirectory(prefix="memd-") as tmp:
        root = Path(tmp)
        spaces = prepare(root)
        config = base_config(
            root,
            spaces,
            server={"socket_mode": "0666", "allowed_uids": [OTHER]},
            search={"index_delay_seconds": 30.0},  # the background pass never helps: queries must catch up
            warm={"retention_days": 3650},
        )
        config["workspaces"]["ruled"].update(readers=[OTHER], writers=[0])
        with running_for_module(root, config) as daemon:
            for directory in daemon.socket_path.parents:  # let uid OTHER reach the socket
                if directory == Path(tempfile.gettempdir()):
                    break
                directory.chmod(directory.stat().st_mode | 0o011)
            yield daemon


def hits(d: RunningDaemon, query: str, **params: Any) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = d.call("memory.search", query=query, **params)["hits"]
    return result


def test_hits_come_from_every_tier_with_their_locations_and_marked_snippets(d: RunningDaemon) -> None:
    d.call("hot.note", workspace="alpha", text="the validator caches signing keys for 5 minutes")
    d.call("warm.log", workspace="alpha", action="Refactored JWT validation", details={"file": "auth/jwt.py"})

    (note,) = hits(d, "minutes", workspace="alpha")
    path = d.workspace("alpha") / note["file"]
    assert note["tier"] == "hot" and "the validator caches" in path.read_text().split("\n")[note["lines"][0] - 1]
    assert note["snippet"] == "the validator caches signing keys for 5 «minutes»"

    (logged,) = hits(d, "refactored", workspace="alpha")
    assert logged["file"] == f"warm/{TODAY.isoformat()}.md" and logged["date"] == TODAY.isoformat()
    day = (d.workspace("alpha") / logged["file"]).read_text().split("\n")
    assert day[logged["lines"][0] - 1].endswith(" - Refactored JWT validation")
    first, last = logged["lines"]
    assert "file: auth/jwt.py" in day[first:last] and day[last - 1] == "```", "the range ends with the entry"

    (learning,) = hits(d, "vault")
    assert (learning["workspace"], learning["file"], learning["lines"], learning["heading"]) == (
        "alpha",
        "cold/MEMORY.md",
        [4, 4],
        "Auth",
    )

    (archived,) = hits(d, "billing")
    assert (archived["file"], archived["date"]) == (f"warm/archive/{OLD.isoformat()[:7]}.md.gz", OLD.isoformat())


def test_a_write_is_visible_to_the_very_next_search(d: RunningDaemon) -> None:
    with d.client() as c:
        for i in range(20):
            c.call("warm.log", workspace="beta", action=f"deployed build {i} to the canary fleet")
            found = c.call("memory.search", workspace="beta", query=f'"build {i}"')["hits"]
            assert [h["heading"] for h in found] == [f"deployed build {i} to the canary fleet"]
        c.call("cold.learn", workspace="beta", category="Deploys", learning="canaries run for an hour")
        assert [h["tier"] for h in c.call("memory.search", workspace="beta", query="canaries hour")["hits"]] == ["cold"]


def test_an_outside_edit_is_adopted_into_the_index(d: RunningDaemon) -> None:
    memory = d.workspace("alpha") / "cold" / "MEMORY.md"
    memory.write_text(MEMORY + "\n## Ops\n- [2026-01-01] the pager rotation starts on Mondays\n", encoding="utf-8")
    wait_for(lambda: hits(d, "pager", workspace="alpha"), "the person's learning in the index")
    day = d.workspace("beta") / "warm" / f"{(TODAY - timedelta(days=2)).isoformat()}.md"
    day.write_text(day_text(TODAY, WarmEntry("07:00:00", "manual note about the flaky runner")), encoding="utf-8")
    wait_for(lambda: hits(d, "flaky runner", workspace="beta"), "the person's day file in the index")
    day.unlink()
    wait_for(lambda: not hits(d, "flaky runner", workspace="beta"), "the deleted day file out of the index")


def test_a_search_answers_from_the_index_and_a_read_or_the_watcher_brings_an_outside_edit_into_it(
    make_daemon: Any, short_root: Path
) -> None:
    """A search does not stat the workspace's files first (its cost does not grow with the number of day files):
    an edit memd has not adopted yet is not found; the next read of the workspace adopts it, and then it is."""
    root = short_root / "u"
    config = base_config(root, {"alpha": root / "ws" / "alpha"}, watch={"enabled": False})
    daemon = make_daemon("u", config=config)
    daemon.call("warm.log", workspace="alpha", action="a logged entry")
    assert hits(daemon, "logged", workspace="alpha")
    day = daemon.workspace("alpha") / "warm" / f"{(TODAY - timedelta(days=2)).isoformat()}.md"
    day.write_text(day_text(TODAY, WarmEntry("07:00:00", "a handwritten entry")), encoding="utf-8")

    assert hits(daemon, "handwritten", workspace="alpha") == []  # not adopted yet: no watcher, no read since
    daemon.call("warm.recent", workspace="alpha", days=3)  # a read looks at the files and adopts the day
    (found,) = hits(daemon, "handwritten", workspace="alpha")
    assert found["file"] == f"warm/{day.name}"


def test_a_reindex_from_scratch_equals_the_incremental_index(d: RunningDaemon) -> None:
    state = Path(d.config["daemon"]["state_dir"]) / "search.sqlite3"
    hits(d, "anything")  # catch up every workspace

    def rows() -> list[Any]:
        with contextlib.closing(sqlite3.connect(f"file:{state}?mode=ro", uri=True)) as conn:
            return conn.execute(
                "SELECT workspace, file, tier, kind, date, time, line_start, line_end, heading, body, ref FROM docs "
                "ORDER BY workspace, file, line_start, kind, heading, body"
            ).fetchall()

    before = rows()
    result = d.call("memory.reindex")
    assert rows() == before and before
    assert set(result["workspaces"]) == {"alpha", "beta", "ruled", "ranked"}
    assert d.call("memory.reindex", workspace="alpha")["workspaces"]["alpha"] == len(
        [r for r in before if r[0] == "alpha"]
    )
    assert rows() == before


@pytest.mark.parametrize(
    "query",
    [
        'NEAR("jwt" "vault", 3)',
        "body:vault OR heading:jwt",
        "jwt AND vault NOT keys",
        "^jwt*",
        '"""',
        '"unclosed',
        "jwt\x00vault",
        "-only -excluded",
        "( ) { } [ ] * : ^ -",
        "'; DROP TABLE docs; --",
        "x" * 10_240,
        "jwt " * 40,
        "\ud800",
    ],
)
def test_hostile_queries_get_an_answer_or_a_clear_error_and_memd_stays_up(d: RunningDaemon, query: str) -> None:
    try:
        result = d.call("memory.search", query=query)
        assert isinstance(result["hits"], list)
    except MemdError as exc:
        assert exc.code == INVALID_PARAMS, exc.message
        assert "fts5" not in exc.message.lower() and "sqlite" not in exc.message.lower()
    assert d.call("ping")["pong"] is True


def test_a_topics_ranking_uses_the_index_as_it_is_and_still_returns_every_learning_it_should(
    d: RunningDaemon,
) -> None:
    """context.get and cold.get rank learnings with the index without waiting for it to catch up (a topic comes
    with every read, a learning with every cold.learn). A learning the index holds at an older line is still the
    right one, and one it does not hold yet is still found by the substring rule."""
    with d.client() as c:
        c.call("cold.learn", workspace="ranked", category="Parser", learning="the tokenizer caches its state")
        c.call("memory.search", workspace="ranked", query="tokenizer")  # the index has it, at line 4
        for i in range(3):  # inserted above it: its line moves, and the index does not know yet
            c.call("cold.learn", workspace="ranked", category="Parser", learning=f"zebra crossing {i}")

        for method in ("context.get", "cold.get"):
            learned = json.dumps(c.call(method, workspace="ranked", topic="caches"))
            assert "the tokenizer caches its state" in learned
            assert "zebra" not in learned
            zebras = json.dumps(c.call(method, workspace="ranked", topic="zebra"))
            assert all(f"zebra crossing {i}" in zebras for i in range(3))


def test_a_topic_too_costly_to_rank_does_not_hold_up_the_searches_after_it(d: RunningDaemon) -> None:
    """Found by the fuzz suite: context.get with a 2,049-character topic, ranked against a learning that repeats the
    same letter, ran for minutes on the query thread (16 GB) after context.get had given up on it, and every
    memory.search after it waited. Now the ranking query stops at its own deadline: context.get answers (matching
    substrings instead) and so does the search sent next on the same connection."""
    with d.client() as c:
        for i in range(5):
            c.call("cold.learn", workspace="beta", category="Notes", learning="z" * 100_000 + str(i))
        c.call("cold.learn", workspace="beta", category="Notes", learning="fuzz learning")
        c.call("memory.search", workspace="beta", query="fuzz")  # indexed now (a topic's ranking does not wait)
        stopped = c.call("status")["search"]["stopped"]
        context = c.call("context.get", workspace="beta", topic="fuzz " + "z" * 2049)
        assert "fuzz learning" in json.dumps(context)
        wait_for(lambda: c.call("status")["search"]["stopped"] == stopped + 1, "the ranking query stopped by itself")
        assert c.call("memory.search", workspace="beta", query="x")["hits"] == []
        assert [h["snippet"] for h in c.call("memory.search", workspace="beta", query="fuzz")["hits"]] == [
            "«fuzz» learning"
        ]


def _as_other(path: str, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The answers to `requests`, sent by a forked child running as uid OTHER (standard library only)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(OTHER)
            os.setuid(OTHER)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(20)
                sock.connect(path)
                reader = sock.makefile("rb")
                answers = []
                for i, request in enumerate(requests, 1):
                    sock.sendall(json.dumps({"jsonrpc": "2.0", "id": i, **request}).encode() + b"\n")
                    answers.append(json.loads(reader.readline()))
            os.write(write_end, json.dumps(answers).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    answers: list[dict[str, Any]] = json.loads(data)
    return answers


def test_access_rules_apply_to_every_hit(d: RunningDaemon) -> None:
    for name in ("alpha", "ruled"):
        d.call("warm.log", workspace=name, action=f"rotated the quartz keys in {name}")
    assert {h["workspace"] for h in hits(d, "quartz")} == {"alpha", "ruled"}

    everything, ruled, reindex = _as_other(
        str(d.socket_path),
        [
            {"method": "memory.search", "params": {"query": "quartz"}},
            {"method": "memory.search", "params": {"query": "quartz", "workspace": "ruled"}},
            {"method": "memory.reindex", "params": {}},
        ],
    )
    # "alpha" and "beta" have no rules (anyone on the socket reads them); "ruled" lists OTHER as a reader.
    assert {h["workspace"] for h in everything["result"]["hits"]} == {"alpha", "ruled"}
    assert [h["workspace"] for h in ruled["result"]["hits"]] == ["ruled"]
    assert reindex["error"]["code"] == ACCESS_DENIED


def test_the_index_is_derived_state_in_the_state_dir_only(d: RunningDaemon) -> None:
    state = Path(d.config["daemon"]["state_dir"])
    assert (state / "search.sqlite3").stat().st_mode & 0o077 == 0
    for name in ("alpha", "beta", "ruled"):
        names = {p.name for p in d.workspace(name).rglob("*")}
        assert not any("sqlite" in n or "search" in n for n in names)
    status = d.call("status")["search"]
    assert status["available"] is True and status["errors"] == 0


def test_memd_search_prints_hits_for_people_and_json_for_machines(d: RunningDaemon) -> None:
    d.call("warm.log", workspace="beta", action="tuned the zookeeper session timeout")
    base = [sys.executable, "-m", "memd", "--config", str(d.config_path)]
    people = subprocess.run([*base, "search", "beta", "zookeeper"], capture_output=True, text=True, env=d.env)
    assert people.returncode == 0, people.stderr
    assert f"beta  warm/{TODAY.isoformat()}.md:" in people.stdout and "zookeeper" in people.stdout
    machines = subprocess.run(
        [*base, "search", "zookeeper", "--tier", "warm", "--json"], capture_output=True, text=True, env=d.env
    )
    assert json.loads(machines.stdout)["hits"][0]["heading"] == "tuned the zookeeper session timeout"
    bad = subprocess.run([*base, "search", '"unclosed'], capture_output=True, text=True, env=d.env)
    assert bad.returncode == 1 and "a quote is not closed" in bad.stderr


def test_a_missing_or_foreign_index_is_rebuilt_at_start(make_daemon: Any, short_root: Path) -> None:
    daemon = make_daemon("r", config=base_config(short_root / "r"))
    daemon.call("warm.log", workspace="alpha", action="persisted across restarts")
    assert daemon.call("status")["search"]["rebuilt_at_start"] is True
    daemon.stop()
    daemon.start()
    assert daemon.call("status")["search"]["rebuilt_at_start"] is False
    assert hits(daemon, "persisted")
    daemon.stop()
    state = Path(daemon.config["daemon"]["state_dir"]) / "search.sqlite3"
    with contextlib.closing(sqlite3.connect(state)) as conn:
        conn.execute("PRAGMA user_version = 999")
    daemon.start()
    assert daemon.call("status")["search"]["rebuilt_at_start"] is True
    assert hits(daemon, "persisted")


def test_expired_days_leave_the_index_or_move_with_their_archive(make_daemon: Any, short_root: Path) -> None:
    root = short_root / "s"
    spaces = {"gone": root / "ws" / "gone", "kept": root / "ws" / "kept"}
    for name, path in spaces.items():
        (path / "warm").mkdir(parents=True)
        text = day_text(OLD, WarmEntry("08:00:00", f"an expired entry of {name}"))
        (path / "warm" / f"{OLD.isoformat()}.md").write_text(text, encoding="utf-8")
    config = base_config(root, spaces, warm={"retention_days": 7, "adopted_sweep": "run"})
    config["workspaces"]["kept"]["warm"] = {"mode": "archive"}
    daemon = make_daemon("s", config=config)
    assert {h["workspace"] for h in hits(daemon, "expired")} == {"gone", "kept"}

    swept = daemon.call("retention.sweep")["results"]
    assert all(r["removed"] == [f"{OLD.isoformat()}.md"] for r in swept)
    found = [(h["workspace"], h["file"], h["date"]) for h in hits(daemon, "expired")]
    assert found == [("kept", f"warm/archive/{OLD.isoformat()[:7]}.md.gz", OLD.isoformat())]
