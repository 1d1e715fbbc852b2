"""The checks a summary must pass before a checkpoint applies it (memd.checkpoint_plan.verify_summary), message by
message, and the pinned parts a checkpoint compares (`pinned`), at their edges.

A summary that fails changes nothing (contract 3); each refusal says why, since it is what `status` shows as the
checkpoint's last error.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import pytest

from memd.checkpoint_plan import SECTIONS, Plan, pinned, verify_summary
from memd.errors import CheckpointFailed
from memd.summarizer import SUMMARY_HEADING, Entry, SummaryResult
from memd.tokens import TokenCounter


@dataclass
class Space:
    counter: TokenCounter


@pytest.fixture(scope="module")
def space() -> Space:
    return Space(TokenCounter.for_encoding("cl100k_base"))


def plan(allotment: int = 500, entries: list[Entry] | None = None) -> Plan:
    return Plan(entries or [Entry("n1", "note", "x")], "", allotment, 1000, 3, [])


def refusal(space: Space, text: str, **kwargs: Any) -> str:
    p = kwargs.pop("plan", plan())
    with pytest.raises(CheckpointFailed) as caught:
        verify_summary(space, p, SummaryResult(text, "fake", **kwargs))  # type: ignore[arg-type]
    return caught.value.message


def test_a_cut_off_reply_is_refused_an_unspecified_finish_is_not(space: Space) -> None:
    assert refusal(space, f"{SUMMARY_HEADING}\n- a", finish_reason="length") == (
        "the summary was cut off (finish_reason 'length': it hit its token limit); nothing applied"
    )
    assert verify_summary(space, plan(), SummaryResult("- a", "fake", finish_reason=""))  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["", "  \n", SUMMARY_HEADING, f"  {SUMMARY_HEADING}  \n"])
def test_an_empty_summary_says_so(space: Space, text: str) -> None:
    assert refusal(space, text) == "the summarizer returned an empty summary; nothing applied"


def test_a_refusal_is_quoted_up_to_120_characters(space: Space) -> None:
    body = "I'm sorry, " + "x" * 200

    assert refusal(space, body) == (f"the summarizer returned an error or refusal instead of a summary: {body[:120]!r}")


def test_a_summary_over_its_allotment_names_both_counts(space: Space) -> None:
    text = f"{SUMMARY_HEADING}\n- " + "word " * 50
    tokens = space.counter.count(f"{SUMMARY_HEADING}\n{text.removeprefix(SUMMARY_HEADING).strip()}\n")

    assert refusal(space, text, plan=plan(allotment=tokens - 1)) == (
        f"the summary has {tokens} tokens, over its allotment of {tokens - 1} (the checkpoint target); nothing applied"
    )
    assert verify_summary(space, plan(allotment=tokens), SummaryResult(text, "fake"))  # type: ignore[arg-type]


def test_without_structure_asked_for_any_bullets_and_prose_pass(space: Space) -> None:
    text = f"{SUMMARY_HEADING}\nprose line\n- bullet"

    assert verify_summary(space, plan(), SummaryResult(text, "fake")) == text + "\n"  # type: ignore[arg-type]


def test_a_structured_summary_names_the_first_line_that_breaks_the_structure(space: Space) -> None:
    body = f"{SECTIONS[0]}\n- kept\n\n  continued\nnot a bullet"
    with pytest.raises(CheckpointFailed) as caught:
        verify_summary(space, plan(), SummaryResult(body, "llm"), 0.0, True)  # type: ignore[arg-type]

    assert caught.value.message == (
        "the summary breaks the asked-for structure at line 5 ('not a bullet'): only the headings "
        f"{', '.join(SECTIONS)} and '- ' bullets are accepted; nothing applied"
    )


def test_a_structured_summary_must_keep_the_asked_share_of_facts(space: Space) -> None:
    facts = plan(entries=[Entry("n1", "note", "parser/ast.py line 1234 raised EADDRINUSE on port 8080")])
    body = f"{SECTIONS[0]}\n- parser/ast.py and port 8080"

    assert verify_summary(space, facts, SummaryResult(body, "llm"), 0.5, True)  # type: ignore[arg-type]
    with pytest.raises(CheckpointFailed) as caught:
        verify_summary(space, facts, SummaryResult(body, "llm"), 0.9, True)  # type: ignore[arg-type]
    assert caught.value.message.startswith("the summary keeps 2 of 4 identifiers, paths and numbers")
    assert "(50%, checkpoint.min_fact_coverage is 90%; missing e.g. 1234, eaddrinuse); nothing applied" in (
        caught.value.message
    )


def test_with_no_decision_pinned_every_decision_may_go() -> None:
    doc = {"decisions": [{"action": "a"}, {"action": "b"}], "task": "t"}

    assert pinned({**doc, "decisions": []}, 0, []) == pinned(doc, 0, [])
    assert pinned({**doc, "decisions": [{"action": "b"}]}, 1, []) == pinned(doc, 1, [])
    assert pinned({**doc, "decisions": [{"action": "a"}]}, 1, []) != pinned(doc, 1, [])


def test_a_kept_note_that_changed_is_a_pinned_change() -> None:
    doc = {"notes": [{"id": "n1", "text": "old"}, {"id": "n2", "text": "recent"}]}

    assert pinned({"notes": [doc["notes"][1]]}, 0, ["n2"]) == pinned(doc, 0, ["n2"])
    assert pinned({"notes": [{"id": "n2", "text": "edited"}]}, 0, ["n2"]) != pinned(doc, 0, ["n2"])
    assert pinned({"notes": []}, 0, ["n2"]) != pinned(doc, 0, ["n2"])


def test_a_decision_is_offered_to_the_summarizer_as_action_reason_and_risk() -> None:
    from memd.checkpoint_plan import _decision_text

    assert _decision_text({"action": "use JWT", "reason": "stateless", "risk": "low"}) == (
        "use JWT — stateless (risk: low)"
    )
    assert _decision_text({"action": "use JWT", "reason": "stateless", "risk": ""}) == "use JWT — stateless"
    assert _decision_text({}) == " — "


def test_an_entry_without_id_is_known_by_a_stable_hash_of_its_content() -> None:
    from memd.checkpoint_plan import entry_key

    content = '{"action": "é", "reason": "r"}'  # keys sorted, UTF-8 as it is

    assert entry_key({"reason": "r", "action": "é"}) == "sha256:" + hashlib.sha256(content.encode()).hexdigest()[:16]
    assert entry_key({"id": "d-1", "action": "x"}) == "d-1"


def test_identical_entries_without_id_are_told_apart_by_occurrence_and_ids_are_kept_as_they_are() -> None:
    from memd.checkpoint_plan import entry_key, keyed

    same = {"text": "same"}
    key = entry_key(same)

    assert [k for k, _ in keyed([same, dict(same), dict(same)])] == [key, f"{key}#1", f"{key}#2"]
    assert [k for k, _ in keyed([{"id": "n-1"}, {"id": "n-1"}])] == ["n-1", "n-1"]


def test_a_long_line_that_breaks_the_structure_is_quoted_to_80_characters(space: Space) -> None:
    line = "x" * 200
    with pytest.raises(CheckpointFailed) as caught:
        verify_summary(space, plan(), SummaryResult(line, "llm"), 0.0, True)  # type: ignore[arg-type]

    assert f"at line 1 ({line[:80]!r}):" in caught.value.message


def test_with_three_facts_the_share_is_checked_and_at_most_eight_missing_ones_are_named(space: Space) -> None:
    three = plan(entries=[Entry("n1", "note", "parser/ast.py EADDRINUSE port 8080")])
    body = f"{SECTIONS[0]}\n- nothing of it"
    with pytest.raises(CheckpointFailed) as caught:
        verify_summary(space, three, SummaryResult(body, "llm"), 0.5, True)  # type: ignore[arg-type]
    assert caught.value.message.startswith("the summary keeps 0 of 3 identifiers")

    many = plan(entries=[Entry("n1", "note", " ".join(f"file{i}.py" for i in range(10)) + " file0.py")])
    kept_one = f"{SECTIONS[0]}\n- file0.py"
    with pytest.raises(CheckpointFailed) as caught:
        verify_summary(space, many, SummaryResult(kept_one, "llm"), 0.5, True)  # type: ignore[arg-type]
    assert "keeps 1 of 10" in caught.value.message
    assert "missing e.g. " + ", ".join(sorted(f"file{i}.py" for i in range(1, 10))[:8]) + ");" in caught.value.message


def test_memds_fold_line_is_taken_out_of_a_summary_whole() -> None:
    from memd.checkpoint_plan import fold_line, without_fold_line

    summary = f"{SUMMARY_HEADING}\n- kept\n"

    assert without_fold_line(summary + fold_line("", 4, "abc1234")) == summary


def test_the_fold_line_counts_every_entry_and_checkpoint_so_far_and_names_the_newest_pre_state() -> None:
    from memd.checkpoint_plan import fold_line

    first = fold_line(f"{SUMMARY_HEADING}\n- a\n", 4, "0123456789abcdef0123")
    second = fold_line(f"{SUMMARY_HEADING}\n- a\n{first}", 3, "")
    third = fold_line(second, 5, "fedcba9876543210")

    assert first == "- (folds in 4 entries from 1 checkpoint; pre-state 0123456789ab)\n"
    assert second == "- (folds in 7 entries from 2 checkpoints; pre-state none, snapshots disabled)\n"
    assert third == "- (folds in 12 entries from 3 checkpoints; pre-state fedcba987654)\n"
