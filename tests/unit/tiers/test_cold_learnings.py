"""Specification of the cold store's learnings across insertions (memd.tiers.cold_learnings): whatever the
document, a `Learnings` updated by insertions reads exactly what parsing the new document reads, and so do the
lookups it hands on (by content, copies, the per-topic counts) and a topic's ranking made from them."""

from __future__ import annotations

import gc
from array import array
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from memory_docs import categories, category_names, documents, unfenced, values

from memd import fsio
from memd.tiers import cold_format, cold_selection, cold_tokens
from memd.tiers.cold_edits import insertion_point
from memd.tiers.cold_format import Learning, insert_learning, insert_learning_at, parse_memory
from memd.tiers.cold_learnings import Learnings, Ranked
from memd.tiers.cold_selection import relevant
from memd.tiers.cold_store import ColdStore
from memd.tokens import TokenCounter

TOPICS = ["", "A", "zz", "ab", "xa", "é x", "ba bx", "2024"]  # words of 2+ letters the pieces make, and none


def fresh(text: str) -> Learnings:
    return Learnings.parse(text)


def assert_same(updated: Learnings, text: str) -> None:
    expected = fresh(text)
    assert updated.items == expected.items
    assert updated._sections == expected._sections
    assert updated.by_content() == expected.by_content()
    assert updated.newest_first() == expected.newest_first()
    for topic in TOPICS:
        assert updated.relevant_count(topic) == len(relevant(expected.items, topic)), topic
        assert updated.relevant(topic) == relevant(expected.items, topic), topic
    for learning in expected.items:
        assert updated.copies(learning) == expected.items.count(learning)
    for key, first in expected.by_content().items():
        assert updated.first_and_copies(key) == (first, expected.items.count(first))
        assert updated.first_and_copies(("\x00 no such category", key[1])) is None
    assert updated.first_and_copies(("no such category", "no such text")) is None


def with_lookups(parsed: Learnings) -> Learnings:
    """`parsed`, its lookups made (so that an insertion hands them on rather than the next read making them)."""
    parsed.by_content()
    parsed.newest_first()
    for topic in TOPICS:
        parsed.relevant_count(topic)
    if parsed.items:
        parsed.copies(parsed.items[0])
    return parsed


@settings(max_examples=500, deadline=None)
@given(st.one_of(unfenced, documents), category_names, values)
def test_the_learnings_after_an_insertion_are_what_parsing_the_new_document_reads(
    document: str, category: str, text: str
) -> None:
    result = insert_learning(document, category, "2024-04-01", text)
    at, added = insertion_point(document, result)

    updated = with_lookups(fresh(document)).inserted(document, at, added)

    if updated is not None:
        assert_same(updated, result)
    new_section = result.count("## ") > document.count("## ")
    if not cold_format.may_fence(result) and parse_memory(document) and not new_section and document.endswith("\n"):
        assert updated is not None  # the common case: a learning under an existing section, no fences


@settings(max_examples=200, deadline=None)
@given(
    unfenced, st.lists(st.tuples(category_names, values, st.sampled_from(["2024-01-01", "2024-04-01"])), max_size=12)
)
def test_a_run_of_insertions_keeps_every_lookup_true(document: str, inserts: list[tuple[str, str, str]]) -> None:
    parsed = with_lookups(fresh(document))
    for category, text, day in inserts:
        result, at, added = insert_learning_at(document, category, day, text)
        parsed = parsed.inserted(document, at, added) or with_lookups(fresh(result))
        document = result
    assert_same(parsed, document)


def test_learnings_appended_together_count_as_copies_of_each_other_and_of_those_before() -> None:
    # a fold made while a burst goes on takes the blocks appended since in one piece (ColdStore.folded)
    document = "## A\n- [2024-01-01] one\n"
    result = document
    for category, day, text in [("B", "2024-02-02", "two"), ("B", "2024-02-02", "two"), ("A", "2024-01-01", "one")]:
        result = cold_format.append_learning_at(result, category, day, text)[0]

    updated = with_lookups(fresh(document)).inserted(document, len(document), result[len(document) :])

    assert updated is not None and updated._by_text is not None  # handed on, not made again
    assert_same(updated, result)
    assert updated.copies(Learning("B", "2024-02-02", "two")) == 2
    assert updated.copies(Learning("A", "2024-01-01", "one")) == 2


def test_a_learning_inserted_between_others_of_its_section_lands_between_them() -> None:
    document = "# M\n\n## A\n- [2024-01-01] one\n- [2024-01-02] two\n\n## B\n- [2024-01-03] three\n"
    at = document.index("- [2024-01-02]")
    added = "- [2024-05-05] between\n"

    updated = with_lookups(fresh(document)).inserted(document, at, added)

    assert updated is not None
    assert [lr.text for lr in updated.items] == ["one", "between", "two", "three"]
    assert_same(updated, document[:at] + added + document[at:])


def test_an_insertion_hands_its_lookups_on_and_the_learnings_before_it_keep_none() -> None:
    document = "## A\n- [2024-01-01] one\n"
    before = with_lookups(fresh(document))
    _, at, added = insert_learning_at(document, "A", "2024-02-02", "two")

    after = before.inserted(document, at, added)

    assert after is not None and after._by_text is not None and after._counts and after._by_date is not None
    assert before._by_text is None and not before._counts and before._by_date is None


def ranked_the_plain_way(ranked: list[Learning], learnings: list[Learning], topic: str) -> list[Learning]:
    """What ranked_learnings returned before it kept lookups: the index's, then the rest of the substring rule."""
    chosen = set(ranked)
    return ranked + [lr for lr in relevant(learnings, topic) if lr not in chosen]


@settings(max_examples=300, deadline=None)
@given(unfenced, st.sampled_from(TOPICS), st.data())
def test_a_ranking_lists_and_counts_what_the_index_found_then_the_rest_of_the_substring_rule(
    document: str, topic: str, data: st.DataObject
) -> None:
    parsed = fresh(document)
    by_content = parsed.by_content()
    found = data.draw(st.lists(st.sampled_from(sorted(by_content)), unique=True) if by_content else st.just([]))
    ranked = [by_content[key] for key in found]
    words = cold_selection.topic_words(topic)
    listed = sum(parsed.copies(lr) for lr in ranked if cold_selection.matches(lr, words))

    ranking = Ranked(ranked, lambda: parsed.relevant(topic), len(ranked) + parsed.relevant_count(topic) - listed)

    plain = ranked_the_plain_way(ranked, parsed.items, topic)
    assert list(ranking) == plain and list(ranking) == plain  # and read twice, the same
    assert len(ranking) == len(plain)


def test_the_rest_of_a_ranking_is_not_made_unless_read() -> None:
    made: list[bool] = []

    def rest() -> list[Learning]:
        made.append(True)
        return [Learning("B", "2024-01-01", "late")]

    ranking = Ranked([Learning("A", "2024-01-02", "first")], rest, 2)

    assert next(iter(ranking)).text == "first" and len(ranking) == 2 and not made
    assert [lr.text for lr in ranking] == ["first", "late"] and made == [True]

    nothing_more = Ranked([Learning("A", "2024-01-02", "first")], rest, 1)  # the counts say the rule adds none
    assert [lr.text for lr in nothing_more] == ["first"] and made == [True]


@settings(max_examples=300, deadline=None)
@given(unfenced, st.integers(min_value=0, max_value=80), values)
def test_looking_at_an_insertion_and_its_seams_tells_a_fence_as_the_whole_text_does(
    document: str, at: int, added: str
) -> None:
    document = document.replace("`", "").replace("~", "")  # no marker yet
    at = min(at, len(document))
    for marker_piece in ("", "`", "``", "~"):
        text = document[:at] + marker_piece
        whole = text + added + document[at:]
        assert cold_format.may_fence_after(text + document[at:], len(text), added) == cold_format.may_fence(whole)


def test_a_fence_made_across_an_insertions_seam_is_not_taken_for_none(tmp_path: Path, counter: TokenCounter) -> None:
    path = tmp_path / "MEMORY.md"
    path.write_text("## A\nx``\n")
    store = ColdStore(path, counter)
    store.load()
    assert store.fence_free(store.text)
    text = "## A\nx```\n"  # one backtick inserted next to two: a marker neither side held
    path.write_text(text)

    store.commit(text, store.write_for(text), fsio.Fingerprint.of_stat(path.stat()))

    assert not store.fence_free(store.text)


def test_learnings_of_one_date_share_one_date_string_parsed_or_inserted() -> None:
    """A MEMORY.md of thousands of learnings holds few dates; each learning kept its own copy (64 bytes a line)."""
    document = "# Memory\n\n## Ops\n" + "".join(f"- [2026-12-03] learning {i}\n" for i in range(50))
    parsed = Learnings.parse(document)
    added = "- [2026-12-03] one more\n"
    at = document.index("## Ops\n") + len("## Ops\n")
    after = parsed.inserted(document, at, added)

    assert after is not None
    assert len({id(learning.date) for learning in after.items}) == 1


@settings(max_examples=200, deadline=None)
@given(
    unfenced,
    st.lists(st.tuples(category_names, values), min_size=1, max_size=6),
    st.lists(st.tuples(category_names, values), min_size=1, max_size=6),
)
def test_learnings_appended_after_the_same_learnings_twice_each_read_their_own_document(
    document: str, first: list[tuple[str, str]], second: list[tuple[str, str]]
) -> None:
    """Appends share one list of learnings with the Learnings before them (no copy of every learning per
    `cold.learn`); a batch planned twice, or a fold's base, appends to the same Learnings again."""
    if document and not document.endswith("\n"):
        document += "\n"
    base = fresh(document)

    def append(parsed: Learnings, text: str, learnings: list[tuple[str, str]]) -> tuple[Learnings, str]:
        for category, learning in learnings:
            made = cold_format.append_learning_at(text, category, "2024-04-01", learning)
            if made is None:
                break
            result, at, added = made
            parsed = parsed.inserted(text, at, added) or fresh(result)
            text = result
        return parsed, text

    one, one_text = append(base, document, first)
    two, two_text = append(base, document, second)
    more, more_text = append(one, one_text, second)

    assert base.items == fresh(document).items
    assert one.items == fresh(one_text).items
    assert two.items == fresh(two_text).items
    assert more.items == fresh(more_text).items


@settings(max_examples=200, deadline=None)
@given(st.one_of(unfenced, documents))
def test_by_content_names_the_first_learning_of_each_category_and_text_as_a_plain_dict_did(document: str) -> None:
    parsed = fresh(document)
    plain: dict[tuple[str, str], Learning] = {}
    for learning in reversed(parsed.items):
        plain[(learning.category, learning.text)] = learning

    by_content = parsed.by_content()

    assert dict(by_content) == plain and len(by_content) == len(plain)
    assert all(by_content[key] == learning for key, learning in plain.items())  # the first in file order (its date)
    assert ("no such category", "x") not in by_content


def test_a_text_under_two_categories_is_found_under_each() -> None:
    document = "## A\n- [2024-01-01] same\n## B\n- [2024-01-02] same\n## A\n- [2024-01-03] same\n"
    by_content = fresh(document).by_content()

    assert by_content[("A", "same")].date == "2024-01-01" and by_content[("B", "same")].date == "2024-01-02"
    assert sorted(by_content) == [("A", "same"), ("B", "same")]


def test_no_object_is_held_per_learning() -> None:
    """A busy agent adds tens of thousands of learnings a day: each one held as a tuple of objects with entries in
    the lookups was ~170 bytes (the hour soak's RSS grew by them). The learnings and their lookups are arrays."""
    document = "## A\n" + "".join(f"- [2024-01-{n % 28 + 1:02d}] learning number {n}\n" for n in range(3000))
    parsed = with_lookups(fresh(document))
    gc.collect()
    tracked = sum(1 for obj in gc.get_objects() if isinstance(obj, (Learning, str)) and "learning number" in str(obj))

    assert tracked < 10
    assert parsed.items == parse_memory(document)


def burst_into(document: str, burst: list[tuple[str, str]]) -> tuple[str, Learnings]:
    """`document` with `burst` appended as a burst appends it, and its learnings as the store carries them (parsed
    once, then each block taken in as it is appended)."""
    text, known = document, fresh(document)
    for category, value in burst:
        made = cold_format.append_learning_at(text, category, "2024-05-01", value)
        assert made is not None
        after, _, added = made
        carried = known.appended(len(text), text.endswith("\n"), added)
        known = carried if carried is not None else fresh(after)
        text = after
    return text, known


def fold_of(text: str, run_start: int, known: Learnings) -> tuple[str, Learnings | None]:
    blocks = cold_format.parse_appended(text[run_start:])
    assert blocks is not None
    folded, steps = cold_format.fold_appended_steps(text[:run_start], blocks)
    assert folded == cold_format.fold_appended(text[:run_start], blocks)
    return folded, known.folded(run_start, steps)


@settings(max_examples=500, deadline=None)
@given(
    st.one_of(unfenced, documents).filter(bool),
    st.lists(st.tuples(st.one_of(category_names, categories), values), min_size=1, max_size=12),
)
def test_a_fold_moves_the_learnings_it_folds_and_reads_what_parsing_the_folded_text_reads(
    document: str, burst: list[tuple[str, str]]
) -> None:
    text, known = burst_into(document, burst)

    folded, moved = fold_of(text, len(document), known)

    if moved is not None:  # None: not told this way (a fence marker, a heading on an open last line): parsed
        expected = fresh(folded)
        assert moved.items == expected.items
        assert moved._sections == expected._sections
        assert moved._arena is known._arena  # the same learnings moved, not parsed again
        assert sorted(moved._ids()) == sorted(known._ids())


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(unfenced, documents).filter(bool),
    st.lists(st.tuples(st.one_of(category_names, categories), values), min_size=1, max_size=12),
)
def test_a_fold_counted_from_what_it_moves_comes_to_what_counting_the_folded_text_gives(
    counter: TokenCounter, document: str, burst: list[tuple[str, str]]
) -> None:
    """The store counts a fold by what the run and the fold's insertions add, not the folded file."""
    text, known = burst_into(document, burst)
    store = ColdStore(Path("/nonexistent/MEMORY.md"), counter)

    fold = store.prepare_fold(text, len(document), known, tokens=counter.count(text))

    assert fold is not None
    assert fold.tokens == counter.count(fold.text)


def test_a_burst_folded_under_sections_old_and_new_is_moved_not_parsed_again() -> None:
    document = (
        "# Agent Memory\n\n## A\nprose first\n- [2024-01-01] one\n\n## B\n- [2024-01-02] two\n\n## A\n"
        "- [2024-01-03] 3\n"
    )
    burst = [("A", "x"), ("C", "y"), ("B", "z"), ("A", "w"), ("C", "y"), ("é \\ 2", "v")]
    text, known = burst_into(document, burst)

    folded, moved = fold_of(text, len(document), known)

    assert moved is not None
    assert moved.items == fresh(folded).items and moved._sections == fresh(folded)._sections
    assert [lr.text for lr in moved.items] == ["w", "x", "one", "z", "two", "3", "y", "y", "v"]


DAYS = ["2024-03-01", "2024-04-01", "2024-05-01"]


@settings(max_examples=200, deadline=None)
@given(st.one_of(unfenced, documents).filter(bool), st.data())
def test_learnings_carried_through_insertions_bursts_and_folds_read_what_parsing_the_file_reads(
    document: str, data: st.DataObject
) -> None:
    """A chain of what the store does (a learning inserted, a burst's learnings appended, the burst folded), the
    lookups read at random points in between (each `Learnings` hands its lookups to the next: a cache read before
    one step and updated in place by the next must still be true after both), against a parse of the file."""
    text, known, run_start = document, fresh(document), None
    for _ in range(data.draw(st.integers(1, 8), label="steps")):
        step = data.draw(st.sampled_from(["insert", "append", "fold"]), label="step")
        category = data.draw(st.one_of(category_names, categories), label="category")
        value, day = data.draw(values, label="value"), data.draw(st.sampled_from(DAYS), label="day")
        if run_start is not None and step in ("insert", "fold"):  # the store folds a run before any other edit
            blocks = cold_format.parse_appended(text[run_start:])
            assert blocks is not None
            folded, steps = cold_format.fold_appended_steps(text[:run_start], blocks)
            text, known, run_start = folded, known.folded(run_start, steps) or fresh(folded), None
        if step == "insert":
            result = insert_learning(text, category, day, value)
            at, added = insertion_point(text, result)
            text, known = result, known.inserted(text, at, added) or fresh(result)
        elif step == "append":
            made = cold_format.append_learning_at(text, category, day, value)
            if made is None:  # an empty document: its preamble is insert_learning's to write
                continue
            after, _, added = made
            carried = known.appended(len(text), text.endswith("\n"), added)
            run_start = len(text) if run_start is None else run_start
            text, known = after, carried or fresh(after)
        if data.draw(st.booleans(), label="read the lookups now"):
            with_lookups(known)
    assert_same(known, text)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(unfenced, documents).filter(bool),
    st.lists(st.tuples(st.one_of(category_names, categories), values), min_size=1, max_size=12),
    st.lists(st.tuples(st.one_of(category_names, categories), values), max_size=4),
)
def test_a_fold_takes_the_lookups_its_learnings_had_and_they_stay_true(
    document: str, burst: list[tuple[str, str]], since: list[tuple[str, str]]
) -> None:
    """The store adopts a fold, with the blocks appended while it was made, in place of the learnings it held:
    their lookups by text and per topic hold for the fold's too (the same learnings, moved)."""
    text, known = burst_into(document, burst)
    folded, moved = fold_of(text, len(document), with_lookups(known))
    if moved is None:
        return
    later, tip = burst_into_carried(text, with_lookups(known), since)  # appended while the fold was made
    adopted, suffix = moved, later[len(text) :]
    if suffix:  # as ColdStore.folded carries the fold over them
        if not folded.endswith("\n"):
            suffix = "\n" + suffix
        carried = moved.inserted(folded, len(folded), suffix)
        assert carried is not None
        adopted, folded = carried, folded + suffix
        assert adopted._arena is not tip._arena  # a fork: the fold's base held fewer ids than the arena
    handed = tip._by_text

    adopted.take_lookups(tip)

    assert adopted._by_text is handed and tip._by_text is None
    assert_same(adopted, folded)


def burst_into_carried(text: str, known: Learnings, burst: list[tuple[str, str]]) -> tuple[str, Learnings]:
    for category, value in burst:
        made = cold_format.append_learning_at(text, category, "2024-05-02", value)
        assert made is not None
        after, _, added = made
        carried = known.appended(len(text), text.endswith("\n"), added)
        assert carried is not None
        known, text = carried, after
    return text, known


def test_a_parse_of_the_folded_text_takes_no_lookups_from_the_learnings_before() -> None:
    document = "## A\n- [2024-01-01] one\n"
    text, known = burst_into(document, [("A", "two"), ("B", "three")])
    with_lookups(known)
    folded, _ = fold_of(text, len(document), known)
    parsed = fresh(folded)

    parsed.take_lookups(known)

    assert parsed._by_text is None and known._by_text is not None
    assert_same(parsed, folded)


def test_dates_and_categories_take_two_bytes_each_until_one_needs_more() -> None:
    from memd.tiers.cold_arena import names_array as _names_array

    small = _names_array(array("H", [1, 2]), [3])
    grown = _names_array(small, [70_000])

    assert small.typecode == "H" and list(small) == [1, 2, 3]
    assert grown.typecode == "I" and list(grown) == [1, 2, 3, 70_000]
    assert _names_array(grown, [4]).typecode == "I"


def test_a_topic_is_found_in_texts_whose_lowercase_is_longer_than_they_are() -> None:
    """ "İ" lowers to two characters: the positions of a block's lowered text no longer match its own."""
    document = "## A\n- [2024-01-01] İİİİİİİİİİ\n- [2024-01-02] a trip\n- [2024-01-03] other\n- [2024-01-04] İ trip\n"

    parsed = fresh(document)

    assert [lr.text for lr in parsed.relevant("trip")] == ["İ trip", "a trip"]
    assert_same(parsed, document)


def test_a_fold_next_to_blank_lines_is_counted_as_counting_the_folded_text_gives(counter: TokenCounter) -> None:
    """The tokenizer takes a run of line ends as one token: a learning moved above blank lines, or a section
    appended after them, changes the token of the whole run, not only of its own line (found by hypothesis)."""
    document = "## B\n\n"
    text, known = burst_into(document, [("A", ""), ("B", ":")])
    store = ColdStore(Path("/nonexistent/MEMORY.md"), counter)

    fold = store.prepare_fold(text, len(document), known, tokens=counter.count(text))

    assert fold is not None and fold.text == "## B\n- [2024-05-01] :\n\n\n## A\n- [2024-05-01] \n"
    assert fold.tokens == counter.count(fold.text)


def test_an_addition_after_blank_lines_is_counted_with_the_line_before_them(counter: TokenCounter) -> None:
    for old, added in [("## A\n \n", "\n## B\n- [2024-01-01] y\n"), ("## A\n\n", " \n"), ("## A\n \n", "\n")]:
        exact = counter.count(old + added) - counter.count(old)

        assert cold_tokens.inserted_tokens(counter, old, len(old), added) == exact, (old, added)
