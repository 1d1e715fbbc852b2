"""Specification of learnings in a burst (memd.tiers.cold_format.append_learning_at, parse_appended,
fold_appended): a learning appended at the end sits under its own category at once, what the cold store holds
after an append is what parsing the file reads, and folding the appended blocks back gives exactly the file that
inserting the same learnings one by one would have made, whatever the file held before them. Which blocks are a
run is the cold store's to know (tests/unit/test_learning_bursts.py)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from memory_docs import category_names, documents, unfenced, values

from memd.tiers import cold_format
from memd.tiers.cold_format import (
    append_learning_at,
    fold_appended,
    insert_learning,
    parse_appended,
    parse_memory,
)
from memd.tiers.cold_learnings import Learnings

DAYS = st.sampled_from(["2024-01-01", "2024-04-01"])
LEARNINGS = st.lists(st.tuples(category_names, values, DAYS), min_size=1, max_size=12)
MEMORY = "# Agent Memory\n\n## A\n- [2024-01-01] a1\n\n## B\n- [2024-01-01] b1\n"


def appended(document: str, learnings: list[tuple[str, str, str]]) -> str:
    for category, text, day in learnings:
        made = append_learning_at(document, category, day, text)
        assert made is not None
        document = made[0]
    return document


def inserted(document: str, learnings: list[tuple[str, str, str]]) -> str:
    for category, text, day in learnings:
        document = insert_learning(document, category, day, text)
    return document


def folded(document: str, run_start: int) -> str:
    blocks = parse_appended(document[run_start:])
    assert blocks is not None
    return fold_appended(document[:run_start], blocks)


@settings(max_examples=500, deadline=None)
@given(documents.filter(lambda d: d != ""), LEARNINGS)
def test_a_fold_of_appended_learnings_is_the_file_inserting_them_one_by_one_makes(
    document: str, learnings: list[tuple[str, str, str]]
) -> None:
    """Any file before the burst: fences, prose, a section a person wrote twice, an empty `## ` heading."""
    burst = appended(document, learnings)

    assert folded(burst, len(document)) == inserted(document, learnings)


@settings(max_examples=300, deadline=None)
@given(documents.filter(lambda d: d != ""), LEARNINGS, LEARNINGS)
def test_folding_in_two_goes_is_folding_once(
    document: str, first: list[tuple[str, str, str]], then: list[tuple[str, str, str]]
) -> None:
    """A fold made while the burst goes on: what was appended after it follows it, and the next fold takes it."""
    burst = appended(document, first)
    once = folded(burst, len(document))
    later = appended(burst, then)[len(burst) :]
    glued = once + ("" if once.endswith("\n") else "\n") + later

    assert folded(glued, len(once)) == inserted(document, first + then)


@settings(max_examples=400, deadline=None)
@given(unfenced.filter(lambda d: d.strip() != ""), LEARNINGS)
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


@settings(max_examples=500, deadline=None)
@given(documents.filter(lambda d: d != ""), LEARNINGS)
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
        after = parsed.inserted(document, at, added)  # only the block is read, whatever fences the file holds
        assert after is not None
        parsed, document = after, result
    expected = Learnings.parse(document)
    assert parsed.items == expected.items
    assert parsed._sections == expected._sections
    assert parsed.by_content() == expected.by_content()
    assert parsed.relevant_count("A") == expected.relevant_count("A")


def test_each_appended_learning_comes_in_a_block_of_its_own() -> None:
    burst = appended(MEMORY, [("A", "a2", "2024-02-02"), ("A", "a3", "2024-02-02"), ("B", "b2", "2024-02-02")])

    assert burst == MEMORY + "\n## A\n- [2024-02-02] a2\n\n## A\n- [2024-02-02] a3\n\n## B\n- [2024-02-02] b2\n"
    assert folded(burst, len(MEMORY)) == (
        "# Agent Memory\n\n## A\n- [2024-02-02] a3\n- [2024-02-02] a2\n- [2024-01-01] a1\n\n"
        "## B\n- [2024-02-02] b2\n- [2024-01-01] b1\n"
    )


def test_a_burst_that_ends_on_a_new_category_is_still_found_and_folded() -> None:
    burst = appended(MEMORY, [("A", "a2", "2024-02-02"), ("C", "c1", "2024-02-02")])

    assert folded(burst, len(MEMORY)) == (
        "# Agent Memory\n\n## A\n- [2024-02-02] a2\n- [2024-01-01] a1\n\n## B\n- [2024-01-01] b1\n\n"
        "## C\n- [2024-02-02] c1\n"
    )


def test_a_new_category_first_in_a_burst_is_a_section_as_an_insertion_makes_it() -> None:
    burst = appended(MEMORY, [("C", "c1", "2024-02-02"), ("C", "c2", "2024-02-02")])

    assert folded(burst, len(MEMORY)) == MEMORY + "\n## C\n- [2024-02-02] c2\n- [2024-02-02] c1\n"


def test_a_fold_keeps_a_persons_repeated_and_empty_sections_where_they_are() -> None:
    """The earlier design searched for a trailing empty heading's text (and looped for ever), and folded a
    person's repeated sections: the fold now only replays the run's learnings into what comes before it."""
    person = "## A\n- [2024-01-01] a1\n\n## A\nSee the runbook.\n- [2024-01-01] a2\n\n## \n"
    burst = appended(person, [("A", "a3", "2024-02-02")])

    assert folded(burst, len(person)) == person.replace(
        "## A\n- [2024-01-01] a1", "## A\n- [2024-02-02] a3\n- [2024-01-01] a1"
    )


def test_only_blocks_as_memd_appends_them_are_a_run() -> None:
    assert parse_appended("\n## A\n- [2024-01-01] a\n\n## B\n- [2024-01-01] b\n") == [
        ("A", "- [2024-01-01] a\n"),
        ("B", "- [2024-01-01] b\n"),
    ]
    assert parse_appended("\n\n## A\n- [2024-01-01] a\n") == [("A", "- [2024-01-01] a\n")]  # after an open line
    assert parse_appended("\n## A\n- [2024-01-01] a\nby hand\n") is None
    assert parse_appended("\n## A\n- [2024-01-01] a\n- [2024-01-01] b\n") is None
    assert parse_appended("\n## A\n- [2024-01-01] a") is None
    assert append_learning_at("", "A", "2024-02-02", "x") is None  # the preamble is an insertion's to write


def test_a_backtick_run_in_a_learnings_text_is_folded_like_any_learning() -> None:
    burst = appended(MEMORY, [("A", "a2", "2024-02-02"), ("A", "wrap code in ``` blocks", "2024-02-03")])

    assert [lr.text for lr in parse_memory(folded(burst, len(MEMORY)))][:3] == ["wrap code in ``` blocks", "a2", "a1"]
