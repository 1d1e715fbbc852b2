"""The hot store encodes and counts each batch's document from what it remembers of the batch before: the result
is always what encoding and counting the whole document afresh gives."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

from memd.tiers import hot_format, hot_render
from memd.tiers.by_identity import SLACK, ByIdentity
from memd.tiers.hot_format import HotDoc
from memd.tiers.hot_store import HotStore
from memd.tokens import TokenCounter

T0 = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)


def afresh(counter: TokenCounter, doc: HotDoc) -> int:
    return sum(counter.count_piece(line) for line in hot_render.render_lines(doc))


def edits(seed: int, steps: int) -> list[HotDoc]:
    """A session as agents and checkpoints edit it: notes, decisions, progress, a checkpoint now and then that
    keeps the newest notes and replaces the summary, and a reload from the file (new objects, equal values)."""
    rnd = random.Random(seed)
    doc = hot_format.empty_doc()
    docs = []
    for i in range(steps):
        now = T0 + timedelta(seconds=i)
        roll = rnd.random()
        if roll < 0.4:
            doc, _ = hot_format.add_note(
                doc, f"note {i}: read src/m{i % 7}.py, {rnd.randint(1, 99)} ms\nsecond line", now
            )
        elif roll < 0.55:
            doc, _ = hot_format.add_decision(doc, f"use v{i}", f"because {i}", "low" if i % 2 else None, now)
        elif roll < 0.75:
            doc, _ = hot_format.update_progress(doc, f"step {i}", files=[f"f{i % 5}.py"], pending_add=[f"p{i}"])
        elif roll < 0.85:  # a checkpoint: old notes and decisions go, a new summary comes
            notes, decisions = doc.get("notes") or [], doc.get("decisions") or []
            doc = {**doc, "notes": notes[-3:], "decisions": decisions[-1:], "summary": f"# Context Summary\n- s{i}"}
        elif roll < 0.9:  # the files read again: every element a new object, equal to the one before
            doc = hot_format.parse(hot_format.serialize(doc), "hot/context.json")
        else:  # a person's edit of one note in place of another (same id, other text)
            notes = list(doc.get("notes") or [])
            if notes:
                notes[0] = {**notes[0], "text": f"edited {i}"}
                doc = {**doc, "notes": notes}
        docs.append(doc)
    return docs


def test_each_batchs_count_and_json_equal_those_of_the_document_made_afresh(tmp_path: Path) -> None:
    counter = TokenCounter.for_encoding("cl100k_base")
    store = HotStore(tmp_path / "hot" / "context.json", counter)
    for seed in range(3):
        for doc in edits(seed, 300):
            assert store.count(doc) == afresh(counter, doc)
            context, own = hot_format.split(doc, {}, normalize=True)
            for part in (context, own):
                assert hot_format.serialize(part, store._encoded) == hot_format.serialize(part)


def test_a_skeleton_of_some_notes_does_not_change_the_next_full_count(tmp_path: Path) -> None:
    counter = TokenCounter.for_encoding("cl100k_base")
    store = HotStore(tmp_path / "hot" / "context.json", counter)
    doc = edits(7, 200)[-1]
    full = store.count(doc)
    store.count({**doc, "notes": (doc.get("notes") or [])[-2:], "summary": ""})  # what a checkpoint plan asks
    assert store.count(doc) == full == afresh(counter, doc)


def test_an_element_is_made_once_while_it_stays_in_the_list() -> None:
    made: list[object] = []
    memo: ByIdentity[str] = ByIdentity(lambda e: made.append(e) or repr(e))
    first = [{"n": 1}, {"n": 2}]
    assert memo(first) == ["{'n': 1}", "{'n': 2}"]
    second = [*first, {"n": 3}]
    assert memo(second) == ["{'n': 1}", "{'n': 2}", "{'n': 3}"]
    assert len(made) == 3  # the first two were not made again
    equal = [{"n": 1}]  # equal in value, another object: made anew (its value is never compared)
    assert memo(equal) == ["{'n': 1}"] and len(made) == 4


def test_what_is_remembered_stays_bounded_by_the_lists_asked_about() -> None:
    memo: ByIdentity[int] = ByIdentity(lambda e: e["n"])
    for start in range(0, 5000, 10):  # a sliding window of 10 live elements, each list new objects
        window = [{"n": n} for n in range(start, start + 10)]
        assert memo(window) == list(range(start, start + 10))
        assert len(memo) <= 2 * len(window) + SLACK
