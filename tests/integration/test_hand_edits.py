"""Mistakes a person (or another tool) makes in a tier file by hand never make memd answer with an internal error:
every read and write of the workspace either serves the file, odd lines shown as written, or reports a storage
error the caller can act on (CorruptFile, a checkpoint refused), and the daemon goes on serving.

One real daemon, one workspace per case: it is filled through the protocol, then one file is saved the way editors
save (a temporary file renamed over it) holding one mistake, then every method that reads or writes a tier is
called. (A learning dated `2026-02-30` failed every `cold.get` and `context.get` this way until 2727b4a, and half a
UTF-16 surrogate pair escaped in a hot file, `"\\ud800"`, every write of the hot tier.)
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from harness import RunningDaemon, base_config, running_for_module

from memd.errors import INTERNAL_ERROR, MemdError

TODAY = datetime.now(UTC).date().isoformat()  # the daemon's warm timezone is UTC (harness)
Edit = Callable[[str], str]


def hot_json(mutate: Callable[[dict[str, Any]], object]) -> Edit:
    def edit(text: str) -> str:
        doc = json.loads(text)
        mutate(doc)
        return json.dumps(doc, indent=2)

    return edit


def appended(lines: str) -> Edit:
    return lambda text: text + lines


CASES: dict[str, tuple[str, Edit]] = {
    # hot/memd.json (memd's notes, summary, checkpoint records) and hot/context.json (the session's fields)
    "notes-a-string": ("hot/memd.json", hot_json(lambda d: d.update(notes="just a string"))),
    "notes-an-object": ("hot/memd.json", hot_json(lambda d: d.update(notes={"a": 1}))),
    "a-note-without-text": ("hot/memd.json", hot_json(lambda d: d["notes"].append({"id": "n-x"}))),
    "a-note-that-is-a-number": ("hot/memd.json", hot_json(lambda d: d["notes"].append(7))),
    "summary-a-list": ("hot/memd.json", hot_json(lambda d: d.update(summary=["a", "b"]))),
    "checkpoints-numbers": ("hot/memd.json", hot_json(lambda d: d.update(checkpoints=[1, 2]))),
    "version-a-word": ("hot/memd.json", hot_json(lambda d: d.update(version="two"))),
    "decisions-numbers": ("hot/context.json", hot_json(lambda d: d.update(decisions=[1, 2, 3]))),
    "a-decision-without-action": ("hot/context.json", hot_json(lambda d: d.update(decisions=[{"reason": "r"}]))),
    "task-a-number": ("hot/context.json", hot_json(lambda d: d.update(task=42))),
    "files-of-every-type": ("hot/context.json", hot_json(lambda d: d.update(files_modified=["a.py", 3, None, {}]))),
    "pending-an-object": ("hot/context.json", hot_json(lambda d: d.update(pending_actions={"a": 1}))),
    "a-number-past-float": ("hot/context.json", lambda text: text.replace('"the task"', "1" + "0" * 400)),
    "half-a-surrogate-in-a-note": ("hot/memd.json", lambda text: text.replace("note one", "note \\ud800 one")),
    "half-a-surrogate-in-the-task": ("hot/context.json", lambda text: text.replace("the task", "the \\udfff task")),
    "hot-empty": ("hot/context.json", lambda text: ""),
    "hot-a-list": ("hot/context.json", lambda text: "[]"),
    # cold/MEMORY.md and cold/PROPOSED.md
    "a-thirteenth-month": ("cold/MEMORY.md", appended("- [2026-13-01] thirteenth\n")),
    "a-day-zero": ("cold/MEMORY.md", appended("- [0000-00-00] zero\n")),
    "a-learning-without-text": ("cold/MEMORY.md", appended("- [2026-01-01]\n- [2026-01-01] \n")),
    "a-heading-without-text": ("cold/MEMORY.md", appended("##\n- [2026-01-01] under a bare heading\n")),
    "a-third-level-heading": ("cold/MEMORY.md", appended("### Sub\n- [2026-01-01] under it\n")),
    "a-category-twice": ("cold/MEMORY.md", appended("\n## Ops\n- [2026-01-02] the second Ops\n")),
    "memory-crlf": ("cold/MEMORY.md", lambda text: text.replace("\n", "\r\n")),
    "memory-bom": ("cold/MEMORY.md", lambda text: "\ufeff" + text),
    "a-nul": ("cold/MEMORY.md", appended("- [2026-01-01] nul\x00here\n")),
    "an-unclosed-fence": ("cold/MEMORY.md", appended("```\n- [2026-01-01] fenced\n")),
    "half-learning-lines": ("cold/MEMORY.md", appended("- [\n- [2\n")),
    "unicode-line-separators": ("cold/MEMORY.md", appended("- [2026-01-01] a\u2028b\u2029c\n")),
    "a-200k-learning": ("cold/MEMORY.md", appended("- [2026-01-01] " + "x" * 200_000 + "\n")),
    "broken-proposals": (
        "cold/PROPOSED.md",
        lambda text: "# Proposed\n\n- [2026-02-30] broken\n  - id: \n  - supersedes: [x] y\n- [2026-01-01] (p-zz) no\n",
    ),
    # warm/ day files
    "no-such-time": (f"warm/{TODAY}.md", appended("### 25:61:00 - late\nResult: ok\n\n")),
    "entries-without-action": (f"warm/{TODAY}.md", appended("### 10:00:00 -\n\n### 10:00:01 - \n\n")),
    "garbage-and-an-open-fence": (f"warm/{TODAY}.md", appended("random garbage\n```\nunclosed\n")),
    "the-header-twice": (f"warm/{TODAY}.md", lambda text: text + text.splitlines()[0] + "\n\n"),
    "a-cut-last-line": (f"warm/{TODAY}.md", appended("### 11:00:00 - cut sh")),
    "day-crlf": (f"warm/{TODAY}.md", lambda text: text.replace("\n", "\r\n")),
    "a-day-file-of-no-day": (
        "warm/2026-02-30.md",
        lambda text: "# Activity Log 2026-02-30 (UTC+00:00, UTC)\n\n### 10:00:00 - impossible day\n\n",
    ),
}

# Every method that reads or writes a workspace's tiers, with plain parameters.
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("hot.get", {}),
    ("cold.get", {}),
    ("cold.get", {"topic": "ops"}),
    ("context.get", {}),
    ("context.get", {"topic": "learned"}),
    ("context.get", {"all": True}),
    ("warm.recent", {}),
    ("warm.day", {"date": TODAY}),
    ("memory.search", {"query": "did"}),
    ("proposals.list", {}),
    ("hot.note", {"text": "after the edit"}),
    ("progress.update", {"step": "next", "files": ["g.py"]}),
    ("decision.record", {"action": "b", "reason": "c"}),
    ("warm.log", {"action": "after the edit"}),
    ("cold.learn", {"category": "Ops", "learning": "after the edit"}),
    ("checkpoint.run", {}),
    ("retention.sweep", {}),
]


@pytest.fixture(scope="module")
def memd() -> Iterator[RunningDaemon]:
    with tempfile.TemporaryDirectory(prefix="memd-") as d:
        root = Path(d) / "h"
        names = {name: root / "ws" / name for name in CASES}
        config = base_config(root, workspaces=names)
        config["snapshot"] = {"enabled": False}
        with running_for_module(root, config) as daemon:
            yield daemon


def save_like_an_editor(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.swp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


@pytest.mark.parametrize("case", list(CASES))
def test_a_hand_edit_never_makes_memd_answer_an_internal_error(memd: RunningDaemon, case: str) -> None:
    file, edit = CASES[case]
    memd.call("session.start", workspace=case, task="the task", session_id="s-1")
    memd.call("progress.update", workspace=case, step="first", files=["f.py"], pending_add=["p"])
    memd.call("decision.record", workspace=case, action="a", reason="r")
    memd.call("hot.note", workspace=case, text="note one")
    memd.call("warm.log", workspace=case, action="did x", result="ok")
    memd.call("cold.learn", workspace=case, category="Ops", learning="learned")
    path = memd.root / "ws" / case / file
    before = path.read_text(encoding="utf-8") if path.exists() else ""
    save_like_an_editor(path, edit(before).encode("utf-8"))

    internal = []
    for method, params in CALLS:
        try:
            memd.call(method, workspace=case, **params)
        except MemdError as exc:
            if exc.code == INTERNAL_ERROR:
                internal.append(f"{method} {params}: {exc}")
    memd.call("status")

    assert internal == []
    assert memd.call("ping")["pong"]
