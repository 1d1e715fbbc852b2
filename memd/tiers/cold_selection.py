"""Which of the cold tier's learnings a topic selects, and in what order: `relevant` and the rule's pieces.

A topic's words (`topic_words`: distinct, lowercased, 2+ characters) are matched as case-insensitive substrings
of a learning's category (2 points a word) and text (1 point); the learnings that score are listed best first,
ties newest first, and a topic without such a word lists every learning newest first. This is what a read shows
of MEMORY.md, not how the file is written, so it lives apart from memd.tiers.cold_format: the cold store's
parsed learnings keep its answers across insertions (memd.tiers.cold_learnings), and the topic ranking of the
search index adds the learnings only this rule finds (memd.handlers.search). Pure: no I/O. Imports the cold
format (Learning).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterable, Sequence

from memd.tiers.cold_format import Learning

_WORD_RE = re.compile(r"\w+")
_DATE = operator.itemgetter(1)  # Learning.date
_SCORE = operator.itemgetter(0)


def topic_words(topic: str | None) -> list[str]:
    """The words of `topic` that `relevant` matches: distinct, lowercased, 2+ characters."""
    return list(dict.fromkeys(w.lower() for w in _WORD_RE.findall(topic or "") if len(w) >= 2))


def newest_first(learnings: Sequence[Learning]) -> list[Learning]:
    """Learnings by date, newest first; those of one date in file order."""
    return sorted(learnings, key=_DATE, reverse=True)


def matches(learning: Learning, words: Sequence[str]) -> bool:
    """Would `relevant` list this learning for a topic of these `words` (topic_words)?"""
    return matcher(words)(learning)


def matcher(words: Sequence[str]) -> Callable[[Learning], bool]:
    """`matches` for many learnings: each category is looked at once (a file has few), a text only when its
    category does not match already."""
    if not words:
        return lambda _: True
    categories: dict[str, bool] = {}

    def match(learning: Learning) -> bool:
        found = categories.get(learning.category)
        if found is None:
            low = learning.category.lower()
            found = categories[learning.category] = any(w in low for w in words)
        if found:
            return True
        text = learning.text.lower()
        return any(w in text for w in words)

    return match


def relevant(
    learnings: Sequence[Learning],
    topic: str | None,
    by_date: list[Learning] | None = None,
    categories: Iterable[str] | None = None,
) -> list[Learning]:
    """Learnings for `topic`, best first; all of them, newest first, when there is no topic.

    Each distinct topic word (2+ characters) scores 2 when found in the category and 1 when found in the text
    (case-insensitive substrings); only learnings scoring above 0 are kept, ordered by score then date,
    newest first. A topic without any such word counts as no topic: better the newest learnings than none.
    `by_date`: `newest_first(learnings)`, when the caller keeps it (then returned itself when there is no topic);
    `categories`: a set holding every learning's category, when the caller knows one without reading them all.
    """
    ordered = by_date if by_date is not None else newest_first(learnings)
    words = topic_words(topic)
    if not words:
        return ordered
    # A category's score once per category (a file has few), and one word (most topics) without a generator:
    # this runs on every read with a topic, over every learning (55 ms at 20,000 learnings before, ~8 ms now).
    if categories is None:
        categories = {item.category for item in learnings}
    by_category = {c: 2 * sum(w in c.lower() for w in words) for c in categories}
    scored: list[tuple[int, Learning]] = []
    if len(words) == 1:
        word = words[0]
        for item in ordered:
            score = by_category[item.category] + (word in item.text.lower())
            if score:
                scored.append((score, item))
    else:
        for item in ordered:
            text = item.text.lower()
            score = by_category[item.category] + sum(w in text for w in words)
            if score:
                scored.append((score, item))
    scored.sort(key=_SCORE, reverse=True)
    return [item for _, item in scored]
