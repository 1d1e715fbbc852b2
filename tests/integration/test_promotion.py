"""Promote before expire, against the real daemon: a scripted week of warm logs swept past the retention window.
The dry run lists what the real run then writes to cold/PROPOSED.md before the days go; expected candidates are
proposed, duplicates and near-duplicates are not, an update of a learning is marked as superseding it, the cap
holds; accept moves a proposal into MEMORY.md, reject drops it, MEMORY.md is untouched otherwise; a hand edit of
PROPOSED.md is adopted; memory.search finds proposals; context.get shows them only when asked. With
`[promote] backend = "openai"` the scripted LLM chooses, and an answer citing no real entry falls back.

One daemon serves the extractive tests (the sweep runs once, in the fixture); the LLM test starts its own.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fakellm import FakeLLM, Reply
from harness import RunningDaemon, base_config, running_for_module, wait_for

from memd.errors import INVALID_PARAMS, MemdError
from memd.tiers import warm_format
from memd.tiers.warm_format import WarmEntry

TODAY = datetime.now(UTC).date()
WEEK = [TODAY - timedelta(days=14 - i) for i in range(7)]  # all past the 7-day window
OLD = (WEEK[0] - timedelta(days=100)).isoformat()  # when the learnings of MEMORY.md were written
MEMORY = (
    f"# Agent Memory\n\nKept by hand.\n\n## Auth\n- [{OLD}] JWT secrets live in vault\n\n"
    f"## Testing\n- [{OLD}] run pytest with -x\n"
)
EARLIER = (
    "# Proposed learnings\n\n## Ops\n"
    f"- [{OLD}] deploys go through the staging branch first\n  - id: p-earlier0\n  - kind: notable\n"
)


def e(time: str, action: str, result: str | None = None, **details: str) -> WarmEntry:
    return WarmEntry(time, action, tuple(details.items()), result)


SCRIPT: dict[int, list[WarmEntry]] = {
    0: [
        e("09:00:00", "decision: use SQLite FTS5 for search", reason="it ships with Python", risk="low"),
        e("10:00:00", "Ran test suite", "3 failed: test_jwt token expired"),
        e("10:05:00", "Fixed test_jwt", "pinned the clock in the fixture"),
    ],
    1: [e("11:00:00", "Tuned the test run", "run pytest with -x -n 4", learn="true", category="Testing")],
    2: [
        e(
            "09:00:00", "Checked where secrets are", learn="true", learning="jwt secrets live in vault!"
        ),  # MEMORY.md has it
        e("09:30:00", "Noted", learning="The JWT secrets live in the vault.", learn="yes"),  # near-duplicate
    ],
    3: [e("12:00:00", "Deploys go through the staging branch first! #learning")],  # an earlier proposal
    4: [e(f"1{i}:00:00", f"the flag FEATURE_{i} is read at startup only", learn="true") for i in range(5)],
    5: [e("16:00:00", "note from hot", id="n-7", ts="x", text="the cache lives in /var/cache/memd", checkpoint="c1")],
    6: [e("08:00:00", "ran the build", "ok")],
}
EXPECTED = {
    ("decision", "Decisions", "use SQLite FTS5 for search (because it ships with Python)"),
    (
        "fix",
        "Errors and fixes",
        "Ran test suite: 3 failed: test_jwt token expired: fixed by Fixed test_jwt: pinned the clock in the fixture",
    ),
    ("notable", "Testing", "Tuned the test run: run pytest with -x -n 4"),
    *(("notable", "Learnings", f"the flag FEATURE_{i} is read at startup only") for i in range(3)),
    ("note", "Notes", "the cache lives in /var/cache/memd"),
}


def seed(ws: Path, script: dict[int, list[WarmEntry]]) -> None:
    for tier in ("hot", "warm", "cold"):
        (ws / tier).mkdir(parents=True, exist_ok=True)
    for i, entries in script.items():
        day = WEEK[i]
        text = f"# Activity Log {day.isoformat()} (UTC+00:00, UTC)\n\n" + "".join(
            map(warm_format.render_entry, entries)
        )
        (ws / "warm" / f"{day.isoformat()}.md").write_text(text, encoding="utf-8")


@dataclass
class Swept:
    d: RunningDaemon
    dry: dict[str, Any]
    real: dict[str, Any]
    listed: list[dict[str, Any]]
    memory_after_sweep: str


@pytest.fixture(scope="module")
def swept() -> Iterator[Swept]:
    with tempfile.TemporaryDirectory(prefix="memd-") as tmp:
        root = Path(tmp)
        ws = root / "ws" / "week"
        seed(ws, SCRIPT)
        (ws / "cold" / "MEMORY.md").write_text(MEMORY, encoding="utf-8")
        (ws / "cold" / "PROPOSED.md").write_text(EARLIER, encoding="utf-8")
        config = base_config(
            root,
            {"week": ws},
            warm={"retention_days": 7, "timezone": "UTC", "adopted_sweep": "run", "promote_max_per_day": 3},
        )
        with running_for_module(root, config) as d:
            dry = d.call("retention.sweep", workspace="week", dry_run=True)["results"][0]
            real = d.call("retention.sweep", workspace="week")["results"][0]
            listed = d.call("proposals.list", workspace="week")["proposals"]
            yield Swept(d, dry, real, listed, (ws / "cold" / "MEMORY.md").read_text(encoding="utf-8"))


def shape(proposals: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(p["kind"], p["category"], p["text"]) for p in proposals}


def by_text(proposals: list[dict[str, Any]], fragment: str) -> dict[str, Any]:
    (found,) = [p for p in proposals if fragment in p["text"]]
    return found


def test_the_expected_candidates_of_the_week_are_proposed_and_the_days_removed(swept: Swept) -> None:
    assert shape(swept.real["proposed"]) == EXPECTED
    assert swept.real["removed"] == [f"{d.isoformat()}.md" for d in WEEK]
    assert swept.real["promote_backend"] == "extractive"


def test_a_dry_run_shows_exactly_what_the_real_run_then_proposed_and_removed(swept: Swept) -> None:
    assert swept.dry["proposed"] == swept.real["proposed"]
    assert swept.dry["not_proposed"] == swept.real["not_proposed"]
    assert swept.dry["expired"] == swept.real["removed"]
    assert swept.dry["removed"] == []


def test_duplicates_and_near_duplicates_are_not_proposed_and_the_report_says_why(swept: Swept) -> None:
    reasons = {s["text"]: s["reason"] for s in swept.real["not_proposed"]}

    assert reasons["jwt secrets live in vault!"] == (f"already in MEMORY.md: [{OLD}] JWT secrets live in vault")
    assert reasons["The JWT secrets live in the vault."].startswith("near-duplicate of MEMORY.md's")
    assert reasons["Deploys go through the staging branch first!"] == "already proposed as p-earlier0"


def test_an_update_of_a_learning_is_marked_as_superseding_it(swept: Swept) -> None:
    proposal = by_text(swept.real["proposed"], "-n 4")

    assert proposal["supersedes"] == {"date": OLD, "text": "run pytest with -x"}
    assert proposal["category"] == "Testing"


def test_no_day_gives_more_than_the_cap(swept: Swept) -> None:
    per_day: dict[str, int] = {}
    for p in swept.real["proposed"]:
        per_day[p["from"]["day"]] = per_day.get(p["from"]["day"], 0) + 1

    assert max(per_day.values()) == 3
    assert [s["reason"] for s in swept.real["not_proposed"] if "FEATURE" in s["text"]] == [
        f"over warm.promote_max_per_day (3) for {WEEK[4].isoformat()}"
    ] * 2


def test_proposed_md_holds_them_beside_the_earlier_one_and_memory_md_is_untouched(swept: Swept) -> None:
    assert [p["id"] for p in swept.listed] == ["p-earlier0"] + [p["id"] for p in _sorted(swept.real["proposed"])]
    assert swept.memory_after_sweep == MEMORY
    log = swept.d.call("warm.day", workspace="week", date=TODAY.isoformat())["entries"]
    (sweep_entry,) = [x for x in log if x["action"] == "retention-sweep"]
    assert sweep_entry["details"]["proposed"] == ", ".join(p["id"] for p in swept.real["proposed"])


def _sorted(proposals: list[dict[str, Any]]) -> list[dict[str, Any]]:
    order = ["Ops", *dict.fromkeys(p["category"] for p in proposals)]  # file order: by section, then as written
    return sorted(proposals, key=lambda p: order.index(p["category"]))


def test_proposals_are_in_the_snapshot_taken_before_the_days_were_deleted(swept: Swept) -> None:
    commits = swept.d.call("history.list", workspace="week", path="cold/PROPOSED.md")["commits"]
    before = [c for c in commits if "retention" in (c["reason"] or "")]

    assert before, commits
    shown = swept.d.call("history.show", workspace="week", rev=before[0]["rev"], path="cold/PROPOSED.md")["content"]
    assert all(p["id"] in shown for p in swept.real["proposed"])


def test_accept_moves_a_proposal_into_memory_md_replacing_what_it_supersedes(swept: Swept) -> None:
    d, ws = swept.d, swept.d.workspace("week")
    proposal = by_text(swept.listed, "-n 4")

    result = d.call("proposals.accept", workspace="week", id=proposal["id"])

    assert result["replaced"] is True
    day = proposal["date"]
    assert (ws / "cold" / "MEMORY.md").read_text(encoding="utf-8") == MEMORY.replace(
        f"- [{OLD}] run pytest with -x\n", f"- [{day}] Tuned the test run: run pytest with -x -n 4\n"
    )
    assert proposal["id"] not in (ws / "cold" / "PROPOSED.md").read_text(encoding="utf-8")
    assert proposal["id"] not in [p["id"] for p in d.call("proposals.list", workspace="week")["proposals"]]


def test_accept_files_a_proposal_under_a_new_section_when_memory_md_has_none(swept: Swept) -> None:
    d, ws = swept.d, swept.d.workspace("week")
    proposal = by_text(swept.listed, "SQLite FTS5")
    before = (ws / "cold" / "MEMORY.md").read_text(encoding="utf-8")

    d.call("proposals.accept", workspace="week", id=proposal["id"])

    assert (ws / "cold" / "MEMORY.md").read_text(encoding="utf-8") == (
        f"{before}\n## Decisions\n- [{proposal['date']}] {proposal['text']}\n"
    )


def test_reject_drops_a_proposal_and_leaves_memory_md_alone(swept: Swept) -> None:
    d, ws = swept.d, swept.d.workspace("week")
    proposal = by_text(swept.listed, "/var/cache/memd")
    memory = (ws / "cold" / "MEMORY.md").read_bytes()

    d.call("proposals.reject", workspace="week", id=proposal["id"])

    assert "/var/cache/memd" not in (ws / "cold" / "PROPOSED.md").read_text(encoding="utf-8")
    assert "## Notes" not in (ws / "cold" / "PROPOSED.md").read_text(encoding="utf-8")  # its emptied section too
    assert (ws / "cold" / "MEMORY.md").read_bytes() == memory
    with pytest.raises(MemdError) as raised:
        d.call("proposals.reject", workspace="week", id=proposal["id"])
    assert raised.value.code == INVALID_PARAMS


def test_a_hand_edit_of_proposed_md_is_adopted(swept: Swept) -> None:
    d, path = swept.d, swept.d.workspace("week") / "cold" / "PROPOSED.md"
    with path.open("a", encoding="utf-8") as f:
        f.write("\n## Ops\n- [2026-01-05] restart the unit with systemctl --user restart memd\n")

    def listed() -> dict[str, Any] | None:
        found = [p for p in d.call("proposals.list", workspace="week")["proposals"] if "systemctl" in p["text"]]
        return found[0] if found else None

    proposal = wait_for(listed, "the hand-written proposal to be listed")
    assert proposal["from"] is None and proposal["id"].startswith("p-")
    d.call("proposals.reject", workspace="week", id=proposal["id"])
    assert "systemctl" not in path.read_text(encoding="utf-8")


def test_memory_search_finds_proposals_as_their_own_kind(swept: Swept) -> None:
    hits = swept.d.call("memory.search", workspace="week", query="FEATURE_1 startup")["hits"]

    proposal_hits = [h for h in hits if h["file"] == "cold/PROPOSED.md"]
    assert proposal_hits and proposal_hits[0]["kind"] == "proposal" and proposal_hits[0]["tier"] == "cold"


def test_context_get_shows_proposals_only_when_asked(swept: Swept) -> None:
    plain = swept.d.call("context.get", workspace="week", topic="FEATURE flag startup")
    asked = swept.d.call("context.get", workspace="week", topic="FEATURE flag startup", proposals=True)

    assert "FEATURE_1" not in plain["text"] and "proposals" not in plain
    assert "# Proposed Learnings (not yet accepted)" in asked["text"] and "FEATURE_1" in asked["text"]
    assert plain["usage"] == asked["usage"]  # outside every budget, cold's included


# --- the LLM backend --------------------------------------------------------------------------------------------------


def test_an_llm_chooses_candidates_citing_entries_and_a_bad_answer_falls_back_to_the_extractive_rules() -> None:
    secret = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    script = {
        0: [e("09:00:00", "decision: use FTS5", reason="stdlib"), e("10:00:00", "pushed", token=secret)],
        1: [e("09:00:00", "decision: keep the parser", reason="it is tested")],
    }
    good = json.dumps([{"entry": "E1", "category": "Search", "learning": "memd searches with SQLite FTS5"}])
    bad = json.dumps([{"entry": "E9", "category": "X", "learning": "made up"}])
    with tempfile.TemporaryDirectory(prefix="memd-") as tmp, FakeLLM() as fake:
        root = Path(tmp)
        ws = root / "ws" / "llm"
        seed(ws, script)
        fake.script(Reply(good), Reply(bad))
        config = base_config(
            root,
            {"llm": ws},
            warm={"retention_days": 7, "timezone": "UTC", "adopted_sweep": "run"},
            llm={"base_url": fake.url, "model": "test", "api_key_env": "MEMD_TEST_KEY", "max_retries": 0},
            promote={"backend": "openai"},
        )
        with running_for_module(root, config) as d:
            result = d.call("retention.sweep", workspace="llm")["results"][0]

        assert [(p["kind"], p["text"], p["from"]["action"]) for p in result["proposed"]] == [
            ("llm", "memd searches with SQLite FTS5", "decision: use FTS5"),
            ("decision", "keep the parser (because it is tested)", "decision: keep the parser"),
        ]
        assert result["promote_backend"] == "openai"
        assert "E9" in result["promote_fallback"] and WEEK[1].isoformat() in result["promote_fallback"]
        sent = json.dumps([r["body"] for r in fake.requests])
        assert secret not in sent and "[E2] 10:00:00 pushed" in sent
        assert result["removed"] == [f"{day.isoformat()}.md" for day in WEEK[:2]]


def test_accepting_a_proposal_whose_line_is_already_in_memory_md_adds_it_once(make_daemon: Any) -> None:
    d = make_daemon("acc", start=False)
    ws = d.workspace("alpha")
    (ws / "cold").mkdir(parents=True)
    line = f"- [{OLD}] deploys go through the staging branch first\n"
    # An accept cut short by a crash: MEMORY.md already has the line, PROPOSED.md still the proposal.
    (ws / "cold" / "MEMORY.md").write_text(f"# Agent Memory\n\n## Ops\n{line}", encoding="utf-8")
    (ws / "cold" / "PROPOSED.md").write_text(EARLIER, encoding="utf-8")
    d.start()

    d.call("proposals.accept", workspace="alpha", id="p-earlier0")

    assert (ws / "cold" / "MEMORY.md").read_text(encoding="utf-8").count(line) == 1
    assert d.call("proposals.list", workspace="alpha")["proposals"] == []


def test_a_proposal_a_person_dated_impossibly_is_refused_clearly_and_still_shown(make_daemon: Any) -> None:
    d = make_daemon("bad", start=False)
    ws = d.workspace("alpha")
    (ws / "cold").mkdir(parents=True)
    (ws / "cold" / "PROPOSED.md").write_text(EARLIER.replace(OLD, "2024-02-30"), encoding="utf-8")
    d.start()

    with pytest.raises(MemdError) as raised:
        d.call("proposals.accept", workspace="alpha", id="p-earlier0")

    assert raised.value.code == INVALID_PARAMS and "2024-02-30" in raised.value.message
    assert "cold/PROPOSED.md" in raised.value.message
    shown = d.call("context.get", workspace="alpha", proposals=True)["text"]
    assert "[2024-02-30]" in shown and "staging branch" in shown
