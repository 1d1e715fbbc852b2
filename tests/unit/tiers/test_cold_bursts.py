"""Specification of learnings in a burst (memd.tiers.cold_format.append_learning_at, tidy_appended; the cold
store's appends): a learning appended at the end sits under its own category at once, what the cold store holds
after an append is what parsing the file reads, and folding the appended sections back gives exactly the file
that inserting the same learnings one by one would have made. Nothing but the appended lines ever moves."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from memory_docs import category_names, unfenced, values

from memd.tiers import cold_format
from memd.tiers.cold_format import append_learning_at, insert_learning, parse_memory, tidy_appended
from memd.tiers.cold_learnings import Learnings

DAYS = st.sampled_from(["2024-01-01", "2024-04-01"])
LEARNINGS = st.lists(st.tuples(category_names, values, DAYS), min_size=1, max_size=12)


def no_fence(learnings: list[tuple[str, str, str]]) -> bool:
    return not any(cold_format.may_fence(c + t) for c, t, _ in learnings)


MEMORY = "# Agent Memory\n\n## A\n- [2024-01-01] a1\n\n## B\n- [2024-01-01] b1\n"


def appended(document: str, learnings: list[tuple[str, str, str]]) -> str:
    for category, text, day in learnings:
        made = append_learning_at(document, category, day, text)
        assert made is not None
        document = made[0]
    return document


def added_as_in_a_burst(document: str, learnings: list[tuple[str, str, str]]) -> str:
    """What Draft.learn does with each learning of a burst: appended, or where a possible fence rules that out
    (a "```" in a learning's text), the appended sections folded back and the learning inserted."""
    for category, text, day in learnings:
        made = append_learning_at(document, category, day, text)
        if made is None:
            document = insert_learning(tidy_appended(document) or document, category, day, text)
        else:
            document = made[0]
    return document


def inserted(document: str, learnings: list[tuple[str, str, str]]) -> str:
    for category, text, day in learnings:
        document = insert_learning(document, category, day, text)
    return document


def one_section_each(document: str) -> bool:
    """A person's file names each category once (the test below covers one named twice)."""
    _, _, sections = cold_format.parse_sections(document)
    headings = [s.category for s in sections]
    return document.strip() != "" and len(headings) == len(set(headings))


@settings(max_examples=400, deadline=None)
@given(unfenced.filter(one_section_each), LEARNINGS)
def test_appended_learnings_folded_back_are_the_file_inserting_them_one_by_one_makes(
    document: str, learnings: list[tuple[str, str, str]]
) -> None:
    burst = added_as_in_a_burst(document, learnings)
    folded = tidy_appended(burst)

    expected = inserted(document, learnings)
    if not document.endswith("\n"):  # an append first ends the last line; an insertion above it need not
        expected = inserted(document + "\n", learnings)
    assert (burst if folded is None else folded) == expected


@settings(max_examples=400, deadline=None)
@given(unfenced.filter(lambda d: d.strip() != "" and not cold_format.may_fence(d)), LEARNINGS.filter(no_fence))
def test_each_appended_learning_is_under_its_own_category_and_nothing_before_it_moved(
    document: str, learnings: list[tuple[str, str, str]]
) -> None:
    before = parse_memory(document)
    burst = appended(document, learnings)

    assert burst.startswith(document)
    got = parse_memory(burst)
    assert got[: len(before)] == before
    wanted = [(cold_format.unescape_inline(cold_format.escape_category(c)), t, d) for c, t, d in learnings]
    assert [(lr.category, lr.text, lr.date) for lr in got[len(before) :]] == [
        (c, cold_format.unescape_inline(cold_format.escape_inline(t)), d) for c, t, d in wanted
    ]


@settings(max_examples=300, deadline=None)
@given(unfenced.filter(lambda d: d.strip() != "" and not cold_format.may_fence(d)), LEARNINGS.filter(no_fence))
def test_the_learnings_after_an_append_are_what_parsing_the_new_document_reads(
    document: str, learnings: list[tuple[str, str, str]]
) -> None:
    parsed = Learnings.parse(document)
    parsed.by_content()
    parsed.relevant_count("A")
    for category, text, day in learnings:
        made = append_learning_at(document, category, day, text)
        assert made is not None
        result, at, added = made
        after = parsed.inserted(document, at, added)
        assert after is not None
        parsed, document = after, result
    expected = Learnings.parse(document)
    assert parsed.items == expected.items
    assert parsed._sections == expected._sections
    assert parsed.by_content() == expected.by_content()
    assert parsed.relevant_count("A") == expected.relevant_count("A")


def test_each_appended_learning_comes_under_a_heading_of_its_own() -> None:
    burst = appended(MEMORY, [("A", "a2", "2024-02-02"), ("A", "a3", "2024-02-02"), ("B", "b2", "2024-02-02")])

    assert burst == MEMORY + (
        "\n## A\n- [2024-02-02] a2\n\n## A\n- [2024-02-02] a3\n\n## B\n- [2024-02-02] b2\n"
    )  # what a fold began before the last of them left behind it still sits under its own heading
    assert cold_format.ends_untidy(burst) and not cold_format.ends_untidy(MEMORY)
    assert tidy_appended(burst) == (
        "# Agent Memory\n\n## A\n- [2024-02-02] a3\n- [2024-02-02] a2\n- [2024-01-01] a1\n\n"
        "## B\n- [2024-02-02] b2\n- [2024-01-01] b1\n"
    )


def test_a_section_a_person_wrote_twice_with_prose_in_it_is_never_folded() -> None:
    document = "## A\n- [2024-01-01] a1\n\n## A\nSee the runbook.\n- [2024-01-01] a2\n"

    assert tidy_appended(document) is None
    assert tidy_appended(document + "\n## B\n- [2024-01-01] b1\n") is None  # nothing repeats after the prose


def test_prose_and_a_learning_a_person_appended_by_hand_keep_their_places() -> None:
    document = "# M\nintro\n\n## A\nnotes on A\n- [2024-01-01] a1\n"
    burst = appended(document, [("A", "a2", "2024-02-02")]) + "- [2024-02-03] by hand\n"

    assert (
        tidy_appended(burst)
        == "# M\nintro\n\n## A\nnotes on A\n- [2024-02-03] by hand\n- [2024-02-02] a2\n- [2024-01-01] a1\n"
    )


def test_nothing_is_appended_to_or_folded_in_a_file_that_may_hold_a_fence() -> None:
    fenced = "## A\n```\n## A\n- [2024-01-01] in code\n"

    assert append_learning_at(fenced, "A", "2024-02-02", "x") is None
    assert tidy_appended(fenced + "```\n\n## A\n- [2024-01-01] a\n") is None
    assert append_learning_at("", "A", "2024-02-02", "x") is None  # the preamble is an insertion's to write


def test_a_section_a_person_wrote_twice_at_the_end_is_folded_with_its_learnings_kept() -> None:
    document = "## A\n- [2024-01-01] a1\n\n## A\n- [2024-01-01] a2\n"

    assert tidy_appended(document) == "## A\n- [2024-01-01] a2\n- [2024-01-01] a1\n"


def test_a_backtick_run_in_a_learnings_text_is_no_fence_to_the_fold() -> None:
    burst = appended(MEMORY, [("A", "a2", "2024-02-02")]) + "- [2024-02-03] wrap code in ``` blocks\n"

    folded = tidy_appended(burst)

    assert folded is not None and cold_format.ends_untidy(burst) and not cold_format.ends_untidy(folded)
    assert [lr.text for lr in parse_memory(folded)][:3] == ["wrap code in ``` blocks", "a2", "a1"]
