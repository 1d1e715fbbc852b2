"""Promote before expire, the pure parts: what a warm day yields (memd.promote.extract), what is proposed of it
against MEMORY.md and PROPOSED.md (select: duplicates, near-duplicates, superseding, the cap), the PROPOSED.md
format (memd.tiers.proposals_format), and the checks an LLM's answer must pass (memd.promote_llm)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from memd import checkpoint_flush, promote
from memd.errors import Unavailable
from memd.promote_llm import LlmPromoter
from memd.tiers import cold_format, proposals_format
from memd.tiers.proposals_format import Proposal
from memd.tiers.warm_format import WarmEntry

DAY = "2026-03-10"


def entry(time: str, action: str, result: str | None = None, **details: str) -> WarmEntry:
    return WarmEntry(time, action, tuple(details.items()), result)


def texts(proposals: Sequence[Proposal]) -> list[str]:
    return [p.text for p in proposals]


# --- extraction ------------------------------------------------------------------------------------------------


def test_a_decision_with_its_reason_is_a_candidate_and_one_without_a_reason_is_not() -> None:
    found = promote.extract(
        DAY,
        [
            entry("09:00:00", "decision: use SQLite FTS5 for search", reason="it ships with Python", risk="low"),
            entry("09:01:00", "decision: rename the module", reason=""),
        ],
    )

    assert [(p.kind, p.category, p.text) for p in found] == [
        ("decision", "Decisions", "use SQLite FTS5 for search (because it ships with Python)")
    ]
    assert (found[0].day, found[0].time, found[0].action) == (DAY, "09:00:00", "decision: use SQLite FTS5 for search")


def test_an_error_followed_by_its_fix_is_one_candidate_citing_the_fix() -> None:
    found = promote.extract(
        DAY,
        [
            entry("10:00:00", "Ran test suite", "3 failed: test_jwt token expired"),
            entry("10:02:00", "Read the logs"),
            entry("10:05:00", "Fixed test_jwt", "pinned the clock in the fixture"),
        ],
    )

    assert [(p.kind, p.text, p.time) for p in found] == [
        (
            "fix",
            "Ran test suite: 3 failed: test_jwt token expired: fixed by "
            "Fixed test_jwt: pinned the clock in the fixture",
            "10:05:00",
        )
    ]


def test_an_error_without_a_fix_on_the_same_day_is_no_candidate() -> None:
    assert promote.extract(DAY, [entry("10:00:00", "Ran test suite", "3 failed"), entry("11:00:00", "lunch")]) == []


def test_an_entry_with_error_and_fix_details_is_a_candidate() -> None:
    found = promote.extract(DAY, [entry("10:00:00", "deploy", error="EADDRINUSE on :8080", fix="stop the old unit")])

    assert texts(found) == ["EADDRINUSE on :8080: fixed by stop the old unit"]


def test_entries_marked_notable_by_detail_or_tag_are_candidates_in_their_category() -> None:
    found = promote.extract(
        DAY,
        [
            entry("11:00:00", "Found that the API paginates at 100", learn="true", category="API"),
            entry("11:10:00", "Checked the cache #learning", "it lives in /var/cache/memd"),
            entry("11:20:00", "Looked around", learn="yes", learning="the CI cache key includes the lockfile hash"),
            entry("11:30:00", "Not notable", learn="false"),
        ],
    )

    assert [(p.kind, p.category, p.text) for p in found] == [
        ("notable", "API", "Found that the API paginates at 100"),
        ("notable", "Learnings", "Checked the cache: it lives in /var/cache/memd"),
        ("notable", "Learnings", "the CI cache key includes the lockfile hash"),
    ]


def test_a_note_the_checkpoint_flushed_is_a_candidate() -> None:
    assert promote.FLUSHED_NOTE == checkpoint_flush.FLUSHED_NOTE
    flushed = entry("12:00:00", promote.FLUSHED_NOTE, id="n-1", ts="x", text="the cache lives in /var/cache/x")

    assert [(p.kind, p.category, p.text) for p in promote.extract(DAY, [flushed])] == [
        ("note", "Notes", "the cache lives in /var/cache/x")
    ]


def test_routine_entries_yield_nothing_and_long_texts_are_cut_to_one_line() -> None:
    assert promote.extract(DAY, [entry("08:00:00", "ran the build", "ok"), entry("08:01:00", "session-start")]) == []
    (long,) = promote.extract(DAY, [entry("08:02:00", "x" * 1000 + "\nsecond line", learn="true")])
    assert len(long.text) == promote.MAX_TEXT and long.text.endswith("…") and "\n" not in long.text


def test_ids_are_stable_for_the_same_entry_and_text() -> None:
    day = [entry("09:00:00", "decision: a", reason="b")]

    assert promote.extract(DAY, day)[0].id == promote.extract(DAY, day)[0].id
    assert promote.extract(DAY, day)[0].id != promote.extract("2026-03-11", day)[0].id


# --- similarity ---------------------------------------------------------------------------------------------------


def test_normalized_text_ignores_case_punctuation_and_spacing() -> None:
    assert promote.normalize("  Run PyTest -x!  ") == promote.normalize("run pytest, x")


@pytest.mark.parametrize(
    ("a", "b", "near"),
    [
        ("JWT secrets live in vault", "The JWT secrets live in the vault.", True),
        ("run pytest with -x to stop at the first failure", "Run pytest with -x: it stops at first failure", True),
        ("the API rate limit is 100 requests per minute", "the API rate limit is 500 requests per minute", False),
        ("deploys go through staging", "the database lives on the NAS", False),
    ],
)
def test_near_duplicates_share_their_words_and_their_numbers(a: str, b: str, near: bool) -> None:
    assert promote.near_duplicate(promote.words(a), promote.words(b)) is near


# --- selection ----------------------------------------------------------------------------------------------------

MEMORY = (
    "# Agent Memory\n\n## Auth\n- [2026-01-02] JWT secrets live in vault\n\n"
    "## Testing\n- [2026-01-01] run pytest with -x\n\n## Limits\n- [2026-04-01] the API allows 100 requests a minute\n"
)


def candidate(
    text: str, kind: str = "notable", category: str = "Learnings", day: str = DAY, time: str = "09:00:00"
) -> Proposal:
    return Proposal(proposals_format.derived_id(day, time, text), category, day, text, day, time, "a", kind)


def select(candidates: list[Proposal], proposals: Sequence[Proposal] = (), limit: int = 3) -> promote.Selection:
    return promote.select(candidates, cold_format.parse_memory(MEMORY), proposals, limit)


def test_what_memory_md_holds_is_not_proposed_again_nor_its_near_duplicates() -> None:
    chosen = select(
        [candidate("jwt secrets live in vault!"), candidate("The JWT secrets live in the vault", time="10:00:00")]
    )

    assert chosen.proposed == []
    assert [s.reason for s in chosen.skipped] == [
        "already in MEMORY.md: [2026-01-02] JWT secrets live in vault",
        "near-duplicate of MEMORY.md's [2026-01-02] JWT secrets live in vault",
    ]


def test_earlier_proposals_and_candidates_of_the_same_sweep_are_not_proposed_twice() -> None:
    earlier = candidate("deploys go through the staging branch first", day="2026-03-01")
    chosen = select(
        [
            candidate("Deploys go through the staging branch first!"),
            candidate("the cache lives in /var/cache/x", time="10:00:00"),
            candidate("The cache lives in the /var/cache/x directory", time="11:00:00"),
        ],
        [earlier],
    )

    assert texts(chosen.proposed) == ["the cache lives in /var/cache/x"]
    assert [s.reason for s in chosen.skipped] == [
        f"already proposed as {earlier.id}",
        f"near-duplicate of proposal {chosen.proposed[0].id}",
    ]


def test_a_candidate_on_the_subject_of_a_learning_supersedes_it_and_takes_its_category() -> None:
    (proposal,) = select([candidate("run pytest with -x -n 4")]).proposed

    assert proposal.supersedes == ("2026-01-01", "run pytest with -x")
    assert proposal.category == "Testing"


def test_a_candidate_older_than_the_learning_it_would_update_is_dropped() -> None:
    chosen = select([candidate("the API allows 500 requests a minute", category="Limits")])

    assert chosen.proposed == []
    assert (
        chosen.skipped[0].reason
        == "older than the learning it would update: [2026-04-01] the API allows 100 requests a minute"
    )


def test_at_most_the_cap_per_day_in_the_order_notable_decision_fix_note() -> None:
    day = [
        candidate("note one about the cache", kind="note", time="08:00:00"),
        candidate("fix: the flaky test needed a frozen clock", kind="fix", time="09:00:00"),
        candidate("decided to vendor the parser", kind="decision", time="10:00:00"),
        candidate("the deploy key rotates monthly", kind="notable", time="11:00:00"),
        candidate("another day entirely", kind="note", day="2026-03-11"),
    ]

    chosen = select(day, limit=2)

    assert [(p.day, p.kind) for p in chosen.proposed] == [(DAY, "decision"), (DAY, "notable"), ("2026-03-11", "note")]
    assert {s.reason for s in chosen.skipped} == {f"over warm.promote_max_per_day (2) for {DAY}"}


def test_ids_stay_unique_in_the_file() -> None:
    first = candidate("one thing")
    clash = Proposal(first.id, "X", DAY, "something else entirely", DAY, "10:00:00", "b", "notable")

    chosen = select([clash], [first])

    assert [p.id for p in chosen.proposed] == [f"{first.id}-1"]


# --- cold/PROPOSED.md -------------------------------------------------------------------------------------------------


def test_a_proposal_is_a_memory_line_with_its_origin_below_and_reads_back_as_written() -> None:
    proposal = Proposal(
        "p-1a2b3c4d", "Testing", DAY, "run pytest with -x -n 4\nsecond", DAY, "10:00:00", "Ran tests", "notable",
        ("2026-01-01", "run pytest with -x"),
    )  # fmt: skip

    text = proposals_format.insert("", proposal)

    assert text == proposals_format.PREAMBLE + (
        "\n## Testing\n- [2026-03-10] run pytest with -x -n 4\\nsecond\n  - id: p-1a2b3c4d\n"
        "  - from: 2026-03-10 10:00:00 Ran tests\n  - kind: notable\n  - supersedes: [2026-01-01] run pytest with -x\n"
    )
    (back,) = proposals_format.parse(text)
    assert back == Proposal(**{**_fields(proposal), "line": 7, "end": 12})
    assert [lr.text for lr in cold_format.parse_memory(text)] == [proposal.text]  # MEMORY.md's reader sees the line


def _fields(p: Proposal) -> dict[str, Any]:
    return {name: getattr(p, name) for name in Proposal.__slots__}


def test_proposals_go_last_in_their_section_and_removal_leaves_every_other_byte() -> None:
    first, second = candidate("one"), candidate("two", time="10:00:00")
    other = candidate("three", category="Decisions", time="11:00:00")
    text = proposals_format.insert(proposals_format.insert(proposals_format.insert("", first), other), second)

    assert texts(proposals_format.parse(text)) == ["one", "two", "three"]
    without_second = proposals_format.remove(text, proposals_format.find(proposals_format.parse(text), second.id))  # type: ignore[arg-type]
    assert without_second == proposals_format.insert(proposals_format.insert("", first), other)
    only_first = proposals_format.remove(
        without_second,
        proposals_format.find(proposals_format.parse(without_second), other.id),  # type: ignore[arg-type]
    )
    assert only_first == proposals_format.insert("", first)  # the emptied section went with its heading


def test_a_line_written_by_hand_gets_a_stable_id_and_prose_is_kept() -> None:
    text = "# Proposed\n\nSome prose.\n\n## Ops\n- [2026-03-01] restart with systemctl --user\n  - note: mine\n"

    (proposal,) = proposals_format.parse(text)

    assert proposal.id == proposals_format.parse(text)[0].id and proposal.id.startswith("p-")
    assert (proposal.category, proposal.text, proposal.day, proposal.supersedes) == (
        "Ops", "restart with systemctl --user", "", None
    )  # fmt: skip
    assert proposals_format.remove(text, proposal) == "# Proposed\n\nSome prose.\n\n## Ops\n  - note: mine\n"


def test_removing_a_superseded_learning_line_leaves_the_rest_of_memory_md() -> None:
    (_, (line, _), _) = cold_format.located_learnings(MEMORY)

    assert cold_format.remove_line(MEMORY, line) == MEMORY.replace("- [2026-01-01] run pytest with -x\n", "")


# --- the LLM's answer ---------------------------------------------------------------------------------------------


class NoLedger:
    def llm_tokens_left(self, ws: Any) -> int:
        return 0

    def charge_llm(self, ws: Any, tokens: int, redactions: dict[str, int]) -> None:
        raise AssertionError("nothing is sent")


def promoter() -> LlmPromoter:
    return LlmPromoter(None, NoLedger(), 10.0, True, 8000)  # type: ignore[arg-type]


DAY_ENTRIES = [entry("09:00:00", "decision: use FTS5", reason="stdlib"), entry("10:00:00", "Ran tests", "ok")]


def test_an_answer_citing_existing_entries_becomes_proposals_from_those_entries() -> None:
    answer = '```json\n[{"entry": "E2", "category": "Testing", "learning": "the suite passes  in 4 s"}]\n```'

    (proposal,) = promoter().check(answer, DAY, DAY_ENTRIES, 3)

    assert (proposal.kind, proposal.category, proposal.text, proposal.time, proposal.action) == (
        "llm", "Testing", "the suite passes in 4 s", "10:00:00", "Ran tests"
    )  # fmt: skip


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ('[{"entry": "E3", "category": "X", "learning": "y"}]', "not an entry of"),
        ('[{"entry": "2", "category": "X", "learning": "y"}]', "not an entry of"),
        ('[{"entry": "E1", "category": "", "learning": "y"}]', "category"),
        ('[{"entry": "E1", "category": "X", "learning": "  "}]', "empty"),
        (
            '[{"entry": "E1", "category": "X", "learning": "y"}, {"entry": "E2", "category": "X", "learning": "z"}]',
            "more",
        ),
        ("Here you go: nothing", "not a JSON array"),
        ('{"entry": "E1"}', "not a JSON array"),
    ],
)
def test_an_answer_that_fails_a_check_is_refused(answer: str, why: str) -> None:
    with pytest.raises(Unavailable, match=why):
        promoter().check(answer, DAY, DAY_ENTRIES, 1)


def test_what_is_sent_is_redacted_and_labelled_by_entry() -> None:
    secret = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    counts: dict[str, int] = {}

    messages = promoter().messages([entry("09:00:00", "pushed", token=secret)], 3, counts)

    assert secret not in messages[1]["content"] and "[E1] 09:00:00 pushed" in messages[1]["content"]
    assert counts


def test_the_daily_cap_refuses_before_anything_is_sent() -> None:
    with pytest.raises(Unavailable, match="daily LLM token cap"):
        asyncio.run(promoter().choose(object(), DAY, DAY_ENTRIES, 3))
