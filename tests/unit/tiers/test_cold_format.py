"""Specification of the cold MEMORY.md format (memd.tiers.cold_format)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from memory_docs import LINE_BREAKS, categories, category_names, documents, unfenced, values

from memd.tiers import cold_format
from memd.tiers.cold_format import (
    MEMORY_PREAMBLE,
    Learning,
    escape_category,
    insert_learning,
    parse_memory,
    render_learning,
)
from memd.tiers.cold_selection import relevant

# A MEMORY.md that people have been editing: prose, odd blank lines, CRLF here and there, trailing spaces,
# a code sample with a "## " line in it, a learning above the first section.
HAND_EDITED = (
    "# Agent Memory\n"
    "- [2024-01-01] stray learning above any section\n"
    "\n"
    "Notes for whoever reads this.   \n"
    "\n\n\n"
    "## Auth\r\n"
    "Prose about auth, kept as is.\n"
    "- [2024-03-01] JWT secrets live in vault\r\n"
    "- [2024-02-01] tokens expire after 1h\n"
    "\n"
    "```sh\n"
    "## not a section\n"
    "- [2024-09-09] not a learning\n"
    "```\n"
    "## Testing  \n"
    "\n"
    "### a sub-heading is prose\n"
    "- [2024-03-05] run pytest with -x\n"
    "trailing prose without newline"
)


def removals(result: str, piece: str) -> set[str]:
    """Every text obtained by removing one occurrence of `piece` from `result`."""
    found: set[str] = set()
    start = result.find(piece)
    while start != -1:
        found.add(result[:start] + result[start + len(piece) :])
        start = result.find(piece, start + 1)
    return found


def learnings_in(document: str, category: str) -> list[str]:
    return [item.text for item in parse_memory(document) if item.category == category]


# --- parsing ------------------------------------------------------------------------------------------------


def test_learnings_are_read_with_their_section_date_text_and_line() -> None:
    assert cold_format.located_learnings(HAND_EDITED) == [
        (1, Learning("", "2024-01-01", "stray learning above any section")),
        (9, Learning("Auth", "2024-03-01", "JWT secrets live in vault")),
        (10, Learning("Auth", "2024-02-01", "tokens expire after 1h")),
        (19, Learning("Testing", "2024-03-05", "run pytest with -x")),
    ]
    assert parse_memory(HAND_EDITED) == [learning for _, learning in cold_format.located_learnings(HAND_EDITED)]


@settings(max_examples=500, deadline=None)
@given(st.one_of(documents, unfenced, st.text(alphabet="#-[]0123456789 \n\r`~\ufeffabc\\", max_size=200)))
def test_learnings_read_one_at_a_time_are_those_read_at_once_with_the_same_lines(text: str) -> None:
    """The search index reads a whole MEMORY.md a learning at a time (cold_format.iter_located_learnings)."""
    assert list(cold_format.iter_located_learnings(text)) == cold_format.located_learnings(text)


def test_a_learning_in_a_closed_fence_is_not_read_one_at_a_time_either() -> None:
    text = "## A\\nB\r\n```\n- [2024-01-01] in code\n```\n- [2024-01-02] out\r\n\ufeff- [2024-01-03] marked\n"
    expected = [(4, Learning("A\nB", "2024-01-02", "out")), (5, Learning("A\nB", "2024-01-03", "marked"))]
    assert list(cold_format.iter_located_learnings(text)) == cold_format.located_learnings(text) == expected


def test_headings_and_texts_are_unescaped() -> None:
    text = "## a\\nb\n- [2024-01-01] x\\\\y\\nz\n"
    assert parse_memory(text) == [Learning("a\nb", "2024-01-01", "x\\y\nz")]


def test_lines_that_are_neither_headings_nor_learnings_are_prose() -> None:
    text = "##no-space\n* [2024-01-01] star bullet\n- [2024-1-1] short date\n-[2024-01-01] no space\n### h3\n"
    assert parse_memory(text) == []


def test_a_byte_order_mark_does_not_hide_the_first_heading() -> None:
    document = "\ufeff## A\r\n- [2024-01-01] a\r\n"
    assert parse_memory(document) == [Learning("A", "2024-01-01", "a")]
    assert insert_learning(document, "A", "2024-04-01", "b") == "\ufeff## A\r\n- [2024-04-01] b\n- [2024-01-01] a\r\n"


def test_an_unclosed_fence_does_not_hide_the_rest_of_the_file() -> None:
    text = "## A\n```\n## B\n- [2024-01-01] x\n"
    assert cold_format.located_learnings(text) == [(3, Learning("B", "2024-01-01", "x"))]


def test_parsing_never_raises_on_any_text() -> None:
    for text in ["", "\n", "\r\n", "## ", "##", "- [2024-01-01]", "```", "~~~\n## x\n~~~", "\ufeff## x"]:
        parse_memory(text)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_parsing_never_raises(text: str) -> None:
    for item in parse_memory(text):
        assert isinstance(item, Learning)


# --- rendering ----------------------------------------------------------------------------------------------


def test_a_learning_is_one_dated_bullet_line() -> None:
    assert render_learning("2024-03-15", "use uv") == "- [2024-03-15] use uv\n"
    assert render_learning("2024-03-15", "a\n## B") == "- [2024-03-15] a\\n## B\n"


@pytest.mark.parametrize("day", ["2024-02-30", "2024-3-15", "20240315", "2024-03-15\n## x", "", "2024-03-1\u0665"])
def test_a_day_that_is_not_a_calendar_date_is_refused(day: str) -> None:
    with pytest.raises(ValueError):
        render_learning(day, "x")


# --- insertion ----------------------------------------------------------------------------------------------


def test_a_new_learning_goes_first_under_its_category() -> None:
    result = insert_learning(HAND_EDITED, "Auth", "2024-04-01", "rotate keys monthly")
    assert learnings_in(result, "Auth") == [
        "rotate keys monthly",
        "JWT secrets live in vault",
        "tokens expire after 1h",
    ]
    assert "Prose about auth, kept as is.\n- [2024-04-01] rotate keys monthly\n- [2024-03-01]" in result


def test_insertion_changes_no_other_byte_of_the_document() -> None:
    line = "- [2024-04-01] rotate keys monthly\n"
    for category in ["Auth", "Testing"]:
        result = insert_learning(HAND_EDITED, category, "2024-04-01", "rotate keys monthly")
        assert HAND_EDITED in removals(result, line)


def test_a_section_without_learnings_gets_the_learning_right_after_its_heading() -> None:
    document = "# Agent Memory\n\n## Empty\nsome prose\n\n## Next\n- [2024-01-01] n\n"
    result = insert_learning(document, "Empty", "2024-04-01", "first")
    assert result == "# Agent Memory\n\n## Empty\n- [2024-04-01] first\nsome prose\n\n## Next\n- [2024-01-01] n\n"


def test_a_missing_category_is_appended_as_a_new_section_at_the_end() -> None:
    result = insert_learning(HAND_EDITED, "Deploy", "2024-04-01", "blue/green")
    assert result == HAND_EDITED + "\n\n## Deploy\n- [2024-04-01] blue/green\n"
    assert learnings_in(result, "Deploy") == ["blue/green"]


def test_a_missing_category_in_a_file_ending_with_newline_adds_no_extra_newline() -> None:
    document = "# Agent Memory\n\n## A\n- [2024-01-01] a\n"
    result = insert_learning(document, "B", "2024-04-01", "b")
    assert result == document + "\n## B\n- [2024-04-01] b\n"


def test_an_empty_document_starts_with_the_preamble() -> None:
    result = insert_learning("", "Auth", "2024-04-01", "x")
    assert result == MEMORY_PREAMBLE + "\n## Auth\n- [2024-04-01] x\n"
    assert result == "# Agent Memory\n\n## Auth\n- [2024-04-01] x\n"


def test_a_heading_on_the_last_line_without_newline_gets_one() -> None:
    assert insert_learning("## A", "A", "2024-04-01", "x") == "## A\n- [2024-04-01] x\n"


def test_the_first_of_duplicate_sections_is_used() -> None:
    document = "## A\n- [2024-01-01] one\n## A\n- [2024-01-02] two\n"
    result = insert_learning(document, "A", "2024-04-01", "new")
    assert result == "## A\n- [2024-04-01] new\n- [2024-01-01] one\n## A\n- [2024-01-02] two\n"


def test_the_category_is_matched_exactly_and_case_sensitively() -> None:
    document = "## auth\n- [2024-01-01] lower\n"
    result = insert_learning(document, "Auth", "2024-04-01", "upper")
    assert learnings_in(result, "auth") == ["lower"]
    assert learnings_in(result, "Auth") == ["upper"]


def test_surrounding_whitespace_of_a_category_is_not_part_of_it() -> None:
    document = "## Auth   \n- [2024-01-01] a\n"
    result = insert_learning(document, "  Auth\n", "2024-04-01", "b")
    assert learnings_in(result, "Auth") == ["b", "a"]


def test_a_heading_inside_a_code_block_is_not_the_category() -> None:
    document = "```\n## A\n```\n"
    result = insert_learning(document, "A", "2024-04-01", "x")
    assert result == document + "\n## A\n- [2024-04-01] x\n"


def test_crlf_lines_elsewhere_are_left_alone() -> None:
    document = "# Agent Memory\r\n\r\n## A\r\n- [2024-01-01] a\r\n"
    result = insert_learning(document, "A", "2024-04-01", "b")
    assert result == "# Agent Memory\r\n\r\n## A\r\n- [2024-04-01] b\n- [2024-01-01] a\r\n"
    assert learnings_in(result, "A") == ["b", "a"]


@pytest.mark.parametrize("category", ["", "   ", "\n", "\r\n\t"])
def test_an_empty_category_is_refused(category: str) -> None:
    with pytest.raises(ValueError):
        insert_learning("", category, "2024-04-01", "x")


HOSTILE = [
    "x\n## Other",
    "## Other",
    "# Title",
    "\n- [2024-01-01] forged",
    "- [2024-01-01] forged",
    "```",
    "a\r\n## b",
    "back\\slash\\n",
    "a\u2028b\x0bc\x1cd\x85e",
    "a\u2029## b\x0c## c\x1d## d\x1e## e",
    "\\u2028 \\u000b \\u0041",  # what an escaped line break looks like, written literally
]

# Every line break markdown or Unicode knows: markdown ends a line at LF, CR and CRLF; str.splitlines(), editors
# and many renderers also at VT, FF, FS, GS, RS, NEL, LS and PS.


@pytest.mark.parametrize("hostile", HOSTILE)
def test_no_category_or_text_can_create_sections_or_learnings(hostile: str) -> None:
    before = parse_memory(HAND_EDITED)
    result = insert_learning(HAND_EDITED, hostile, "2024-04-01", hostile)
    after = parse_memory(result)
    assert len(after) == len(before) + 1
    new = [item for item in after if (item.category, item.date, item.text) == (hostile.strip(), "2024-04-01", hostile)]
    assert len(new) == 1
    assert {item.category for item in after} == {item.category for item in before} | {hostile.strip()}
    assert result.count("\n## ") + result.startswith("## ") <= HAND_EDITED.count("\n## ") + 1


@pytest.mark.parametrize("brk", LINE_BREAKS, ids=[repr(b) for b in LINE_BREAKS])
def test_an_inserted_learning_holds_no_line_break_any_reader_would_split_on(brk: str) -> None:
    value = f"x{brk}## Forged{brk}- [2024-01-01] forged"

    result = insert_learning(HAND_EDITED, value, "2024-04-01", value)

    added = result.removeprefix(HAND_EDITED)
    assert added.splitlines() == added.split("\n")[:-1]  # LF is the only line break memd writes
    assert [(line, item) for line, item in cold_format.located_learnings(result) if item.date == "2024-04-01"] == [
        (len(result.split("\n")) - 2, Learning(value.strip(), "2024-04-01", value))
    ]


def test_a_line_break_written_by_hand_inside_a_line_is_content() -> None:
    text = "## A\u2028B\n- [2024-01-01] x\x85y \\u0041\n"

    assert parse_memory(text) == [Learning("A\u2028B", "2024-01-01", "x\x85y \\u0041")]


# --- properties ---------------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(documents, categories, values)
def test_insert_then_parse_finds_the_learning_first_in_its_category(document: str, category: str, text: str) -> None:
    result = insert_learning(document, category, "2024-04-01", text)
    expected_category = category.strip()
    before = parse_memory(document)
    after = parse_memory(result)
    assert len(after) == len(before) + 1
    in_category = [item for item in after if item.category == expected_category]
    assert (in_category[0].date, in_category[0].text) == ("2024-04-01", text)


@settings(max_examples=300, deadline=None)
@given(documents, categories, values)
def test_insert_only_adds_bytes(document: str, category: str, text: str) -> None:
    result = insert_learning(document, category, "2024-04-01", text)
    line = render_learning("2024-04-01", text)
    # Into an existing section: the line alone (after a "\n" when the heading was the unterminated last line).
    originals = {document} if document.endswith("\n") else {document, document + "\n"}
    if originals & removals(result, line):
        return
    # A new section at the end, after the preamble when the document was empty, and after a missing "\n".
    base = document or MEMORY_PREAMBLE
    base += "" if base.endswith("\n") else "\n"
    assert result == f"{base}\n## {escape_category(category)}\n{line}"


@settings(max_examples=500, deadline=None)
@given(unfenced, category_names, values)
def test_finding_the_section_by_its_heading_inserts_where_reading_every_line_does(
    document: str, category: str, text: str
) -> None:
    line = render_learning("2024-04-01", text)
    result, at, added = cold_format.insert_learning_at(document, category, "2024-04-01", text)
    assert (result, at, added) == cold_format._insert_by_lines(document, escape_category(category), line)
    assert result == document[:at] + added + document[at:]


@settings(max_examples=300, deadline=None)
@given(documents, categories, values)
def test_where_and_what_an_insertion_added_is_reported_exactly(document: str, category: str, text: str) -> None:
    result, at, added = cold_format.insert_learning_at(document, category, "2024-04-01", text)
    assert result == insert_learning(document, category, "2024-04-01", text)
    assert result == document[:at] + added + document[at:]


# --- relevance ----------------------------------------------------------------------------------------------

L_OLD = Learning("Auth", "2024-01-01", "JWT secrets live in vault")
L_NEW = Learning("Testing", "2024-05-01", "pytest -x stops at the first failure")
L_MID = Learning("Deploy", "2024-03-01", "auth service needs a restart after key rotation")
L_MID_TOO = Learning("Misc", "2024-03-01", "nothing related")
ALL = [L_OLD, L_NEW, L_MID, L_MID_TOO]


@pytest.mark.parametrize("topic", [None, "", "   "])
def test_without_a_topic_every_learning_comes_newest_first(topic: str | None) -> None:
    assert relevant(ALL, topic) == [L_NEW, L_MID, L_MID_TOO, L_OLD]


def test_a_category_match_outweighs_a_text_match() -> None:
    assert relevant(ALL, "auth") == [L_OLD, L_MID]


def test_matches_add_up_and_ties_go_to_the_newest() -> None:
    a = Learning("Auth", "2024-01-01", "x")
    b = Learning("Other", "2024-02-01", "auth and jwt")
    c = Learning("Other", "2024-03-01", "jwt only")
    d = Learning("Auth", "2023-01-01", "jwt rotation")
    # Scores: d = 2 + 1, a = 2, b = 1 + 1, c = 1; a and b tie and the newer comes first.
    assert relevant([a, b, c, d], "JWT auth") == [d, b, a, c]
    assert relevant([d, c, b, a], "jwt, AUTH! jwt") == [d, b, a, c]


def test_matching_is_case_insensitive_substring() -> None:
    assert relevant(ALL, "PYTEST") == [L_NEW]
    assert relevant(ALL, "rotat") == [L_MID]


def test_one_character_words_are_ignored() -> None:
    assert relevant(ALL, "x auth") == [L_OLD, L_MID]


def test_a_topic_of_only_one_character_words_counts_as_no_topic() -> None:
    assert relevant(ALL, "a x ?") == relevant(ALL, None)


def test_nothing_matching_gives_nothing() -> None:
    assert relevant(ALL, "kubernetes") == []


# --- learning_copies: how often a learning is there, under its category (a re-plan's check) -----------------------

HELD = (
    "# Agent Memory\n\n## Parser\n- [2024-03-15] tokens carry offsets\n### details\n- [2024-03-14] nested\n"
    "\n## Testing\n- [2024-03-15] run pytest with -x\n"
    "\n## Parser\n- [2024-03-15] appended in a burst\n"
)


@pytest.mark.parametrize(
    ("category", "day", "text", "held"),
    [
        ("Parser", "2024-03-15", "tokens carry offsets", True),
        ("Testing", "2024-03-15", "run pytest with -x", True),
        ("Parser", "2024-03-15", "appended in a burst", True),  # a block a burst appended, same heading
        ("Parser", "2024-03-14", "nested", True),  # under a ### of the section: still the ## above it
        ("Testing", "2024-03-15", "tokens carry offsets", False),  # the line, under another category
        ("Parser", "2024-03-14", "tokens carry offsets", False),  # another day
        ("Parser", "2024-03-15", "tokens carry", False),  # the start of a line is not the line
        ("Parser", "2024-03-15", "carry offsets", False),  # nor its end
    ],
)
def test_a_learning_is_held_only_as_its_whole_line_under_its_category(
    category: str, day: str, text: str, held: bool
) -> None:
    assert (cold_format.learning_copies(HELD, category, day, text) == 1) is held


def test_a_learning_under_a_heading_on_the_first_line_is_held() -> None:
    assert cold_format.learning_copies("## Parser\n- [2024-03-15] first\n", "Parser", "2024-03-15", "first") == 1
    assert cold_format.learning_copies("- [2024-03-15] orphan\n", "Parser", "2024-03-15", "orphan") == 0


@given(
    st.one_of(documents, unfenced, st.text(alphabet="#-[]0123456789 \n\r`~\ufeffabc\\", max_size=200)),
    categories,
    values,
)
def test_the_copies_of_a_learning_are_those_the_parse_reads_and_an_insertion_adds_one(
    document: str, category: str, text: str
) -> None:
    """What a re-plan relies on (memd.batch.Draft.made), for any file: CRLF, fences, a last line not ended."""
    wanted = parse_memory(f"## {cold_format.escape_category(category)}\n{render_learning('2024-04-01', text)}")
    copies = cold_format.learning_copies(document, category, "2024-04-01", text)
    assert copies == sum(1 for lr in parse_memory(document) if [lr] == wanted)
    result = insert_learning(document, category, "2024-04-01", text)
    assert cold_format.learning_copies(result, category, "2024-04-01", text) == copies + 1


@pytest.mark.parametrize(
    "document",
    [
        "## Parser\r\n- [2024-03-15] crlf\r\n",  # a person's editor saved it with CRLF
        "## Parser\n- [2024-03-15] crlf",  # no newline after the last line
        "## Parser\n```\n## Other\n```\n- [2024-03-15] crlf\n",  # a heading in a fence is no heading
    ],
)
def test_a_learning_is_counted_in_files_the_line_search_cannot_read(document: str) -> None:
    assert cold_format.learning_copies(document, "Parser", "2024-03-15", "crlf") == 1


def test_a_learning_line_in_a_fence_is_no_copy() -> None:
    document = "## Parser\n```\n- [2024-03-15] in code\n```\n"
    assert cold_format.learning_copies(document, "Parser", "2024-03-15", "in code") == 0
