"""A person and an agent on the same files of a real daemon (contract 2): whatever instant a person saves at,
their edit survives together with every acknowledged write; a workspace directory swapped for another is
refused, never followed.

The person saves the way editors do: read, change, write a temp file, rename it over. An editor's save can itself
replace a version it never read (an agent's write that landed after the read): that loss is the person's, not
memd's, so the person here records exactly what each save displaced (the rename is made with RENAME_EXCHANGE so
the displaced file can be looked at) and the check excuses precisely the acknowledged notes a save of the
person's own destroyed.
"""

from __future__ import annotations

import ctypes
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fakellm import Delay, FakeLLM, Reply
from harness import RunningDaemon, base_config, wait_for

from memd.errors import MemdError

KEY_ENV = "MEMD_TEST_LLM_KEY"
_LIBC = ctypes.CDLL(None, use_errno=True)


def exchange(a: Path, b: Path) -> None:
    """renameat2(RENAME_EXCHANGE), the person's own (not memd's code: the test must not trust what it tests)."""
    if _LIBC.renameat2(-100, os.fsencode(a), -100, os.fsencode(b), 2) != 0:
        raise OSError(ctypes.get_errno(), "renameat2")


def careful_save(path: Path, change: Callable[[bytes], bytes]) -> set[str]:
    """Read, change, write a temp file and rename it over the original, as an editor saves. Returns the texts of
    the notes this save destroyed: ones in the version it displaced that it had not read."""
    seen = path.read_bytes()
    written = change(seen)
    tmp = path.with_name(f".{path.name}.person-save")
    tmp.write_bytes(written)
    exchange(tmp, path)
    displaced = tmp.read_bytes()
    tmp.unlink()
    if displaced == seen:
        return set()
    return note_texts(displaced) - note_texts(written)


def note_texts(data: bytes) -> set[str]:
    return {n["text"] for n in json.loads(data).get("notes", [])}


def add_key(key: str) -> Callable[[bytes], bytes]:
    def change(data: bytes) -> bytes:
        doc = json.loads(data)
        doc[key] = "a person's edit"
        return json.dumps(doc, indent=1).encode()

    return change


def stream_notes(daemon: RunningDaemon, ws: str, stop: threading.Event, acked: list[str]) -> None:
    with daemon.client() as c:
        i = 0
        while not stop.is_set() or i < 20:
            text = f"agent note {i}"
            c.call("hot.note", workspace=ws, text=text)
            acked.append(text)
            i += 1


def test_rename_over_saves_while_an_agent_streams_notes_lose_nothing(daemon: RunningDaemon) -> None:
    ws = "alpha"
    daemon.call("session.start", workspace=ws, task="race a person")
    hot = daemon.workspace(ws) / "hot" / "memd.json"  # memd's own hot file: the notes
    stop, acked = threading.Event(), []
    agent = threading.Thread(target=stream_notes, args=(daemon, ws, stop, acked))
    agent.start()
    saves = [f"person_{i}" for i in range(40)]
    destroyed_by_the_person: set[str] = set()
    try:
        for key in saves:
            destroyed_by_the_person |= careful_save(hot, add_key(key))
            time.sleep(0.005)
    finally:
        stop.set()
        agent.join(60)

    daemon.call("hot.note", workspace=ws, text="after the race")
    doc = json.loads(hot.read_bytes())
    assert [k for k in saves if k not in doc] == [], "a person's save was overwritten by memd"
    notes = {n["text"] for n in doc["notes"]}
    lost = [t for t in acked if t not in notes and t not in destroyed_by_the_person]
    assert lost == [], "an acknowledged note was lost by memd"
    assert len(destroyed_by_the_person) <= len(acked) // 2  # the race is real, but memd is not losing to it
    served = daemon.call("hot.get", workspace=ws)["hot"]
    assert all(k in served for k in saves)


def test_shell_appends_to_memory_md_while_an_agent_learns_lose_nothing(daemon: RunningDaemon) -> None:
    ws = "alpha"
    daemon.call("cold.learn", workspace=ws, category="Race", learning="seed")
    memory = daemon.workspace(ws) / "cold" / "MEMORY.md"
    stop, acked = threading.Event(), []

    def learn() -> None:
        with daemon.client() as c:
            i = 0
            while not stop.is_set() or i < 20:
                c.call("cold.learn", workspace=ws, category="Race", learning=f"agent learning {i}")
                acked.append(f"agent learning {i}")
                i += 1

    agent = threading.Thread(target=learn)
    agent.start()
    appended = [f"appended by a person {i}" for i in range(40)]
    try:
        for line in appended:
            fd = os.open(memory, os.O_WRONLY | os.O_APPEND)  # `echo ... >> MEMORY.md`: open, write, close
            os.write(fd, f"- [2026-12-01] {line}\n".encode())
            os.close(fd)
            time.sleep(0.005)
    finally:
        stop.set()
        agent.join(60)

    text = memory.read_text(encoding="utf-8")
    assert [line for line in appended if text.count(f"] {line}\n") != 1] == []
    assert [line for line in acked if text.count(f"] {line}\n") != 1] == []


def test_a_hand_edit_is_kept_by_a_write_sent_before_the_watcher_could_see_it(daemon: RunningDaemon) -> None:
    ws = "beta"
    daemon.call("hot.note", workspace=ws, text="before")
    hot = daemon.workspace(ws) / "hot" / "memd.json"  # memd's own hot file: the notes
    for i in range(10):  # no wait for the watcher: the writer itself must notice the edit
        careful_save(hot, add_key(f"hand_{i}"))
        daemon.call("hot.note", workspace=ws, text=f"right after {i}")

    doc = json.loads(hot.read_bytes())
    assert [f"hand_{i}" for i in range(10) if f"hand_{i}" not in doc] == []
    assert [n["text"] for n in doc["notes"]] == ["before", *(f"right after {i}" for i in range(10))]


@pytest.fixture
def slow_llm() -> Any:
    with FakeLLM() as llm:
        yield llm


def test_a_note_edited_by_a_person_during_the_llm_call_stays_with_its_new_text(
    make_daemon: Callable[..., RunningDaemon], short_root: Path, slow_llm: FakeLLM
) -> None:
    root = short_root / "ckpt"
    config = base_config(
        root,
        llm={"backend": "openai", "base_url": slow_llm.url, "model": "test", "api_key_env": KEY_ENV},
        budget={"hot": 2000},
        checkpoint={"keep_decisions": 1, "recent_share": 0.1},
    )
    daemon = make_daemon("ckpt", config, env={KEY_ENV: "sk-test"})
    ws = "alpha"
    daemon.call("session.start", workspace=ws, task="edit during a checkpoint")
    ids = [daemon.call("hot.note", workspace=ws, text=f"note {i} about the parser")["note"]["id"] for i in range(12)]
    slow_llm.script(Delay(3.0, Reply("# Context Summary\n- the parser notes, summarized\n")))
    outcome: dict[str, Any] = {}

    def run_checkpoint() -> None:
        try:
            outcome["record"] = daemon.call("checkpoint.run", workspace=ws)
        except MemdError as exc:
            outcome["error"] = exc

    runner = threading.Thread(target=run_checkpoint)
    runner.start()
    wait_for(lambda: slow_llm.chat_requests, "the summarizer's request")
    hot = daemon.workspace(ws) / "hot" / "memd.json"  # memd's own hot file: the notes

    def edit_oldest_note(data: bytes) -> bytes:
        doc = json.loads(data)
        doc["notes"][0]["text"] = "note 0, corrected by a person: the parser is in src/parse.py"
        return json.dumps(doc, indent=1).encode()

    careful_save(hot, edit_oldest_note)
    runner.join(60)

    assert "error" not in outcome, outcome.get("error")
    record = outcome["record"]["checkpoint"] if "checkpoint" in outcome["record"] else outcome["record"]
    doc = json.loads(hot.read_bytes())
    kept = {n["id"]: n["text"] for n in doc["notes"]}
    assert kept.get(ids[0]) == "note 0, corrected by a person: the parser is in src/parse.py"
    assert ids[0] in record["kept_edited"]
    assert ids[0] not in record["compressed"]
    assert "summarized" in doc["summary"]


def test_a_workspace_swapped_for_a_symlink_fails_alone_and_touches_nothing_else(daemon: RunningDaemon) -> None:
    alpha, beta = daemon.workspace("alpha"), daemon.workspace("beta")
    daemon.call("hot.note", workspace="alpha", text="alpha's own")
    daemon.call("hot.note", workspace="beta", text="beta's own")
    expired = beta / "warm" / "2020-01-01.md"
    expired.write_text("# 2020-01-01\n", encoding="utf-8")
    beta_before = {p: p.read_bytes() for p in beta.rglob("*") if p.is_file() and ".git" not in p.parts}
    os.rename(alpha, alpha.with_name("alpha-elsewhere"))
    os.symlink(beta, alpha)

    with pytest.raises(MemdError) as write_error:
        daemon.call("hot.note", workspace="alpha", text="must not reach beta")
    with pytest.raises(MemdError):
        daemon.call("hot.get", workspace="alpha")
    with pytest.raises(MemdError):
        daemon.call("retention.sweep", workspace="alpha")

    assert "symlink" in write_error.value.message
    beta_after = {p: p.read_bytes() for p in beta.rglob("*") if p.is_file() and ".git" not in p.parts}
    assert beta_after == beta_before
    status = daemon.call("status")["workspaces"]
    assert "symlink" in (status["alpha"]["identity_error"] or "")
    assert daemon.call("hot.note", workspace="beta", text="beta still served")["note"]["text"] == "beta still served"
