"""The bytes a real daemon writes, checked against docs/format.md with oracles that share no code with memd
(tests/expected.py: literal text, and parsers written for the tests). A renderer bug that memd's own parser reads
back the same way (so every round trip passes) still fails here.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import expected
import pytest
from harness import RunningDaemon, base_config, running_for_module

TRICKY = "a\\b\nline two\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029 ### not a heading: `x`"


@pytest.fixture(scope="module")
def memd() -> Iterator[RunningDaemon]:
    with tempfile.TemporaryDirectory(prefix="memd-") as d:
        root = Path(d) / "f"
        names = ("warm", "literal", "cold", "hot")
        config = base_config(root, {n: root / "ws" / n for n in names}, snapshot={"enabled": False})
        with running_for_module(root, config) as daemon:
            yield daemon


def test_the_documented_day_file_example_is_written_byte_for_byte(memd: RunningDaemon) -> None:
    details = {"file": "auth/jwt.py", "note": "a: b\nsecond line", "Result": "ok"}
    first = memd.call("warm.log", workspace="literal", action="Refactored JWT validation", details=details,
                      result="Success")["entry"]  # fmt: skip
    second = memd.call("warm.log", workspace="literal", action="Ran test suite", result="3 failed, 41 passed")["entry"]

    text = (memd.workspace("literal") / "warm" / f"{first['date']}.md").read_text(encoding="utf-8")
    header, _, body = text.partition("\n")

    assert expected.DAY_HEADER.fullmatch(header) and header.startswith(f"# Activity Log {first['date']}")
    assert body == (
        "\n"
        f"### {first['time']} - Refactored JWT validation\n"
        "```\n"
        "file: auth/jwt.py\n"
        "note: a: b\n"
        "    second line\n"
        "\\Result: ok\n"
        "```\n"
        "Result: Success\n"
        "\n"
        f"### {second['time']} - Ran test suite\n"
        "Result: 3 failed, 41 passed\n"
        "\n"
    )


def test_warm_entries_with_every_escaped_character_match_the_grammar_and_read_back(memd: RunningDaemon) -> None:
    logged: list[tuple[str, dict[str, Any], str | None]] = [
        (TRICKY, {"#tag": TRICKY, "a:b": "c: d", "`fence": "", "Result": "x"}, TRICKY),
        ("x", {}, None),
        ("plain", {"k": "v"}, ""),
        ("two\nlines", {"code": "```py\nx = 1\n```", "\\ marked": "\\ starts like the mark"}, "ok\n\nthen"),
        (" lead", {" k": "\\", "\t": "`````"}, "\\ x"),
    ]
    entries = []
    for action, details, result in logged:
        params: dict[str, Any] = {"action": action, "details": details}
        if result is not None:
            params["result"] = result
        entries.append(memd.call("warm.log", workspace="warm", **params)["entry"])
    day = entries[0]["date"]

    text = (memd.workspace("warm") / "warm" / f"{day}.md").read_text(encoding="utf-8")

    header = text.partition("\n")[0]
    zone = header[len(f"# Activity Log {day} (") : -1] if header.endswith(")") else None
    oracle = expected.warm_day(
        day,
        [expected.warm_entry(e["time"], a, list(d.items()), r) for e, (a, d, r) in zip(entries, logged, strict=True)],
        zone,
    )
    assert text == oracle
    read, problems = expected.read_warm_day(text)
    assert problems == []
    assert read == [(e["time"], a, list(d.items()), r) for e, (a, d, r) in zip(entries, logged, strict=True)]


def test_learnings_are_lines_of_the_documented_form_under_their_category(memd: RunningDaemon) -> None:
    memd.call("cold.learn", workspace="cold", category="Parser", learning="splits on '::'")
    memd.call("cold.learn", workspace="cold", category="Parser", learning=TRICKY)
    memd.call("cold.learn", workspace="cold", category="Ops\nand more", learning="- [2020-01-01] forged? no")

    text = (memd.workspace("cold") / "cold" / "MEMORY.md").read_text(encoding="utf-8")

    day = expected.read_learnings(text)[0][1]
    assert expected.learning_line(day, TRICKY) in text.split("\n", 1)[1]
    assert text.startswith("# Agent Memory\n")
    assert "\n## Parser\n" in text and "\n## Ops\\nand more\n" in text
    assert expected.read_learnings(text) == [  # docs/format.md: a new learning goes first in its section
        ("Parser", day, TRICKY),
        ("Parser", day, "splits on '::'"),
        ("Ops\nand more", day, "- [2020-01-01] forged? no"),
    ]


def test_the_hot_files_are_laid_out_one_field_and_one_element_a_line_and_hold_what_was_sent(
    memd: RunningDaemon,
) -> None:
    memd.call("session.start", workspace="hot", task=TRICKY)
    memd.call("progress.update", workspace="hot", step="step \u2028 one", files=["a.py", "b/c.py"], pending_add=["x"])
    note = memd.call("hot.note", workspace="hot", text=TRICKY)["note"]
    decision = memd.call("decision.record", workspace="hot", action='use "quotes"', reason="r\nr", risk="low")

    hot = memd.workspace("hot") / "hot"
    files = [hot / "context.json", *([hot / "memd.json"] if (hot / "memd.json").exists() else [])]  # memd's own keys

    doc: dict[str, Any] = {}
    for path in files:
        data = path.read_bytes()
        assert expected.hot_layout_problems(data) == [], path
        doc.update(json.loads(data))
    assert (doc["task"], doc["current_step"], doc["files_modified"]) == (TRICKY, "step \u2028 one", ["a.py", "b/c.py"])
    assert doc["pending_actions"] == ["x"]
    assert doc["notes"] == [note]
    assert doc["decisions"] == [decision["decision"]]
    assert doc["decisions"][0]["action"] == 'use "quotes"'
    rendered = memd.call("hot.get", workspace="hot")["rendered"]
    assert expected.note_line(note) in rendered


@pytest.mark.parametrize(
    ("value", "written"),
    [("a\\b", "a\\\\b"), ("x\ny", "x\\ny"), ("\u2028", "\\u2028"), ("\x85\x0b", "\\u0085\\u000b"), ("é ü", "é ü")],
)
def test_the_escaping_oracle_is_the_documented_table(value: str, written: str) -> None:
    assert expected.escape(value) == written
    assert expected.unescape(written) == value
