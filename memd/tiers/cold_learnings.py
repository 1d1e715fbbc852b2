"""The learnings of cold/MEMORY.md as the cold store keeps them between two reads of the file.

A `Learnings` is the parse of one text: the learnings in file order and where each `## ` section starts. The
learning memd inserts (`cold.learn`, an accepted proposal) becomes a new `Learnings` without reading the rest of
the document: its section is found among the headings' offsets, and nothing else moves but the sections below
it. The lookups reads make are kept with it: by content (a topic's ranking names learnings by content), newest
first, and how many learnings each recent topic matches. Each is made at most once per text, and the ones an
insertion can update in place are handed on to the next `Learnings`, so a read after a `cold.learn` costs what it
returns, not the size of MEMORY.md.

No object is held per learning: a MEMORY.md gains tens of thousands of learnings a day under a busy agent, and a
`Learning` tuple with its text string and its entries in the lookups was ~170 bytes of Python objects each (the
hour soak's RSS grew 12-14 MB an hour by them alone). Each learning has an id in an `Arena` (its texts joined in
blocks, its date and category as small ints in arrays, ~40 bytes a learning); a `Learnings` is an array of ids in
file order, and its lookups are arrays of ids (newest first; by the hash of the text). A `Learning` is made when a
read reaches it. Ids only grow: every `Learnings` made from another by an insertion, an append or a fold holds the
ids 0 to its count - 1 of one arena, which is how a scan of the arena's texts tells the learnings of a text.
Pure: no I/O. Imports the cold format and the cold selection (memd.tiers.cold_selection).
"""

from __future__ import annotations

import bisect
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence

from memd.textfmt import unescape_inline
from memd.tiers import cold_format, cold_selection
from memd.tiers.cold_arena import (
    CATEGORIES,
    DATES,
    Arena,
    ByText,
    Picked,
    above_finder,
    position_finder,
    same_ids,
)
from memd.tiers.cold_format import Learning, Section

Content = tuple[str, str]  # (category, text)

# The topics whose match count a `Learnings` keeps (the counts move with every insertion: one test per topic).
COUNTED_TOPICS = 64


class ByContent(Mapping[Content, Learning]):
    """The first learning of each (category, text), in file order, of one `Learnings`."""

    def __init__(self, owner: Learnings) -> None:
        self._owner = owner

    def __getitem__(self, key: Content) -> Learning:
        found = self.get(key)
        if found is None:
            raise KeyError(key)
        return found

    def get(self, key: Content, default: Learning | None = None) -> Learning | None:  # type: ignore[override]
        owner = self._owner
        alike = [i for i in owner._holding(key[1]) if owner._arena.category(i) == key[0]]
        return owner._arena.learning(owner._first_in_file(alike)) if alike else default

    def __contains__(self, key: object) -> bool:
        return isinstance(key, tuple) and len(key) == 2 and self.get(key) is not None

    def __iter__(self) -> Iterator[Content]:
        seen: set[Content] = set()
        for learning in self._owner.items:
            key = (learning.category, learning.text)
            if key not in seen:
                seen.add(key)
                yield key

    def __len__(self) -> int:
        return sum(1 for _ in self)


class Learnings:
    """The learnings of one MEMORY.md text (see the module docstring). Not changed once made, but for its caches,
    which the `Learnings` an insertion makes takes over."""

    def __init__(self, arena: Arena, order: array[int], sections: list[Section], count: int | None = None) -> None:
        # File order: the first `count` ids of `order`. Learnings added at the end share the array with the
        # Learnings before them (see appended), which reads only its own first `count`.
        self._arena = arena
        self._order = order
        self._count = len(order) if count is None else count
        self._sections = sections
        self._offsets = [s.offset for s in sections]
        self._by_text: ByText | None = None
        self._by_date: array[int] | None = None
        self._counts: OrderedDict[tuple[str, ...], int] = OrderedDict()

    @classmethod
    def parse(cls, text: str) -> Learnings:
        items, _, sections = cold_format.parse_sections(text)
        arena = Arena()
        arena.add([(CATEGORIES.id(lr.category), DATES.id(lr.date), lr.text) for lr in items])
        return cls(arena, array("I", range(len(items))), sections)

    # --- reads -------------------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._count

    @property
    def items(self) -> list[Learning]:
        """The learnings in file order (made for this call: reads that need a few use `relevant`)."""
        return [self._arena.learning(i) for i in self._ids()]

    def _ids(self) -> array[int]:
        order = self._order
        return order if len(order) == self._count else order[: self._count]

    def by_content(self) -> ByContent:
        """The learnings by (category, text), the first of two alike as the file has them."""
        return ByContent(self)

    def copies(self, learning: Learning) -> int:
        """How many learnings equal to `learning` (category, date and text), one of the file's, the file holds."""
        arena = self._arena
        alike = sum(
            1
            for i in self._holding(learning.text)
            if arena.category(i) == learning.category and arena.date(i) == learning.date
        )
        return alike or 1

    def first_and_copies(self, key: Content) -> tuple[Learning, int] | None:
        """by_content()[key] and its `copies`, from one lookup (a topic's ranking asks both of every learning the
        index names)."""
        arena = self._arena
        holding = self._holding(key[1])
        if len(holding) == 1:  # most texts are held once
            learning = arena.learning(holding[0])
            return (learning, 1) if learning.category == key[0] else None
        alike = [i for i in holding if arena.category(i) == key[0]]
        if not alike:
            return None
        first = self._first_in_file(alike)
        day = arena.date(first)
        return arena.learning(first), sum(1 for i in alike if arena.date(i) == day)

    def newest_first(self) -> Sequence[Learning]:
        """cold_selection.newest_first of the learnings. Kept, and handed to the next `Learnings` an insertion
        makes, which puts the learnings it adds into it: read it before the next write."""
        return Picked(self._arena, self._newest_ids())

    def relevant(self, topic: str | None) -> Sequence[Learning]:
        """cold_selection.relevant of the learnings; without a topic, `newest_first()` (read it before the next
        write)."""
        words = cold_selection.topic_words(topic)
        if not words:
            return self.newest_first()
        scores = self._scores(words)
        ordered = [i for i in self._newest_ids() if i in scores] if scores else []
        ordered.sort(key=scores.__getitem__, reverse=True)  # stable: newest first within a score
        return Picked(self._arena, ordered)

    def relevant_count(self, topic: str | None) -> int:
        """len(self.relevant(topic)), counted once per topic and text and kept up to date across insertions."""
        words = tuple(cold_selection.topic_words(topic))
        if not words:
            return self._count
        count = self._counts.get(words)
        if count is None:
            count = len(self._scores(words))
            self._counts[words] = count
            if len(self._counts) > COUNTED_TOPICS:
                self._counts.popitem(last=False)
        else:
            self._counts.move_to_end(words)
        return count

    def _scores(self, words: Sequence[str]) -> dict[int, int]:
        categories = {"", *(section.category for section in self._sections)}
        return self._arena.scores(words, categories, self._count)

    def _newest_ids(self) -> array[int]:
        found = self._by_date
        if found is None:
            found = self._by_date = array("I", sorted(self._ids(), key=self._arena.date_ranks().__getitem__))
        return found

    def _holding(self, text: str) -> list[int]:
        found = self._by_text
        if found is None:
            found = self._by_text = ByText(self._arena, self._ids())
        return found.holding(self._arena, text)

    def _first_in_file(self, ids: list[int]) -> int:
        """The first of `ids` (alike in category and text) in file order; any of them when they are of one date:
        then they are equal learnings, and the order is not looked for (a copy of every id, and a search per
        candidate, per learning a ranking names)."""
        date = self._arena.date
        day = date(ids[0])
        if all(date(i) == day for i in ids[1:]):
            return ids[0]
        return min(ids, key=position_finder(self._ids()))

    def take_lookups(self, before: Learnings) -> None:
        """Take the lookups of `before` that do not depend on the order of the learnings (by text, the topic
        counts) when these hold the same learnings under the same ids: a fold of `before`'s text (`folded`), with
        what was appended since (`appended`, on an arena forked from `before`'s). Made again, each would read every
        learning at the first read after every fold. `before` holds them no more."""
        if before._count != self._count or self._by_text is not None or self._counts:
            return
        if not same_ids(self._arena, before._arena, self._count):
            return
        self._by_text, before._by_text = before._by_text, None
        self._counts, before._counts = before._counts, OrderedDict()

    # --- a fold -------------------------------------------------------------------------------------------------

    def folded(self, run_start: int, steps: Sequence[tuple[str, int, str]]) -> Learnings | None:
        """The learnings of the text a fold makes (ColdStore.prepare_fold) of the one these were parsed from, whose
        blocks from `run_start` on a burst appended: `steps` are the fold's insertions into the text before the
        run (cold_format.fold_appended_steps). Found without parsing the folded text: the same ids, moved (a
        parse of a 1 MB MEMORY.md is ~45 ms of Python holding the GIL). None when that cannot be told this way (a
        text that may hold fences, a run that is not one learning per block): parse the folded text instead.
        Safe in a worker while the loop appends to these: only their first `count` ids are read."""
        count = self._count
        arena = self._arena
        j = bisect.bisect_left(self._offsets, run_start)
        run_sections = self._sections[j:]
        first = count - len(run_sections)
        if any(section.first != first + n for n, section in enumerate(run_sections)):
            return None
        order = self._order[:count]  # one slice: atomic under the GIL while the loop extends the array
        own: dict[Learning, list[int]] = {}  # what the fold moves: these ids, each once
        for i in reversed(order[first:]):
            own.setdefault(arena.learning(i), []).append(i)
        del order[first:]
        sections = self._sections[:j]

        def moved(learning: Learning) -> int | None:
            ids = own.get(learning)
            return ids.pop() if ids else None

        for before, at, added in steps:
            if cold_format.may_fence(before) or cold_format.may_fence(added):
                return None
            if at == len(before):  # a section of its own, at the end
                found, _, headed = cold_format.parse_sections(added)
                if not headed or headed[0].first:
                    return None
                shift, above = len(before), len(order)
                heading_ids = [moved(learning) for learning in found]
                if None in heading_ids:
                    return None
                sections += [Section(h.offset + shift, h.category, h.first + above) for h in headed]
                order.extend(i for i in heading_ids if i is not None)
                continue
            k = bisect.bisect_left([section.offset for section in sections], at) - 1
            if k < 0 or (at and before[at - 1] != "\n") or not added.endswith("\n"):
                return None
            category = sections[k].category
            ids: list[int] = []
            for raw in added[:-1].split("\n"):
                match = cold_format.learning_line(raw)
                if match is None:
                    return None
                found_id = moved(Learning(category, match[1], unescape_inline(match[2] or "")))
                if found_id is None:
                    return None
                ids.append(found_id)
            start = before.find("\n", sections[k].offset) + 1
            above = sum(1 for raw in before[start:at].split("\n") if cold_format.learning_line(raw) is not None)
            index = sections[k].first + above
            order[index:index] = array("I", ids)
            grown, more = len(added), len(ids)
            sections = [
                s if n <= k else Section(s.offset + grown, s.category, s.first + more) for n, s in enumerate(sections)
            ]
        if len(order) != count:  # a fold moves learnings; it adds and drops none
            return None
        return Learnings(arena, order, sections)

    # --- an insertion --------------------------------------------------------------------------------------------

    def inserted(self, document: str, at: int, added: str, fence_free: bool = False) -> Learnings | None:
        """The learnings of `document[:at] + added + document[at:]`, where `document` is the text these were
        parsed from and `added` one learning line inserted at the start of a line (what `insert_learning` adds
        under an existing section), found without reading the rest of the document. None when that cannot be
        told this way (anything else inserted, a document that may hold fences): parse the new text instead.
        `fence_free`: the caller knows `not cold_format.may_fence(document)`."""
        if at == len(document) and added:
            return self.appended(len(document), document.endswith("\n"), added)
        # An insertion found by comparing the two texts may start inside a line: a learning inserted before another
        # shares its first characters ("- [2026-12-0"), and the first difference comes after them. The same
        # insertion, moved back over what it shares, starts at the line's start.
        while at and document[at - 1] != "\n" and added and document[at - 1] == added[-1]:
            at -= 1
            added = added[-1] + added[:-1]
        if added.count("\n") != 1 or not added.endswith("\n") or at > len(document):
            return None
        if at and document[at - 1] != "\n":
            return None
        if (not fence_free and cold_format.may_fence(document)) or cold_format.may_fence(added):
            return None
        match = cold_format.learning_line(added[:-1])
        if match is None:
            return None
        k = bisect.bisect_left(self._offsets, at) - 1  # the section whose heading is the last one above `at`
        start = 0 if k < 0 else document.find("\n", self._offsets[k]) + 1
        category = "" if k < 0 else self._sections[k].category
        # The learnings between the heading and the insertion (none for memd's own: it inserts above the first).
        above = sum(1 for raw in document[start:at].split("\n") if cold_format.learning_line(raw) is not None)
        index = (0 if k < 0 else self._sections[k].first) + above
        arena = self._own_arena()
        (i,) = arena.add([(CATEGORIES.id(category), DATES.id(match[1]), unescape_inline(match[2] or ""))])
        grown = len(added)
        sections = [
            s if j <= k else Section(s.offset + grown, s.category, s.first + 1) for j, s in enumerate(self._sections)
        ]
        ids = self._ids()
        order = ids[:index]
        order.append(i)
        order.extend(ids[index:])
        after = Learnings(arena, order, sections)
        self._hand_over(after, [i], at_end=False, index=index)
        return after

    def appended(self, length: int, after_line_end: bool, added: str) -> Learnings | None:
        """`inserted` for text added at the end of the document these were parsed from (what `append_learning_at`
        adds: learning lines, under a new heading or the last one), told only the document's `length` and
        whether it ends with a line end: only `added` is parsed. Whatever fences the document holds: lines added
        after its end that neither open nor close a fence (memd's headings and learning lines never do) leave
        every fence as it was, closed or not, and are outside all of them. None when a line of `added` is a
        fence line, or `added` would continue the document's last line."""
        if length and not after_line_end and not added.startswith("\n"):
            return None
        if any(cold_format.is_fence_line(raw) for raw in added.split("\n")):
            return None
        found, _, headed = cold_format.parse_sections(added)
        category = self._sections[-1].category if self._sections else ""
        shift, count = length, self._count
        sections = [*self._sections, *(Section(h.offset + shift, h.category, h.first + count) for h in headed)]
        first_heading = headed[0].first if headed else len(found)
        entries = [
            (CATEGORIES.id(category if n < first_heading else lr.category), DATES.id(lr.date), lr.text)
            for n, lr in enumerate(found)
        ]
        arena = self._own_arena()
        new = arena.add(entries)
        # Appended to the array these share with the Learnings before them, unless one made from these extended it
        # already (a fold's base, a batch planned twice): a MEMORY.md growing by bursts of learnings would
        # otherwise copy an array of every id at each one, and those ever-larger blocks fragment the heap.
        if len(self._order) == count:
            self._order.extend(new)
            after = Learnings(arena, self._order, sections, count + len(new))
        else:
            order = self._order[:count]
            order.extend(new)
            after = Learnings(arena, order, sections)
        self._hand_over(after, list(new), at_end=True)
        return after

    def _own_arena(self) -> Arena:
        """The arena to add to: these learnings' own, unless ids were added to it after them (then a fork)."""
        arena = self._arena
        return arena if arena.size == self._count else arena.fork(self._count)

    def _hand_over(self, after: Learnings, added: list[int], at_end: bool, index: int = 0) -> None:
        """Give `after` (these learnings and `added`, added) the caches an addition keeps true; this one no
        longer holds them (they describe `after` now). `at_end`: added after every id there was; else the one
        id of `added` was inserted at `index` of these."""
        arena = after._arena
        by_date, self._by_date = self._by_date, None
        if by_date is not None:
            after._by_date = _by_date_after(arena, by_date, added, None if at_end else (self._ids(), index))
        by_text, self._by_text = self._by_text, None
        if by_text is not None:
            for i in added:
                by_text.add(arena, i)
            after._by_text = by_text
        counts, self._counts = self._counts, OrderedDict()
        if counts:
            learnings = [arena.learning(i) for i in added]
            for words in counts:
                matches = cold_selection.matcher(words)
                counts[words] += sum(1 for learning in learnings if matches(learning))
        after._counts = counts


def _by_date_after(
    arena: Arena, by_date: array[int], added: list[int], above: tuple[array[int], int] | None
) -> array[int]:
    """`by_date` (ids newest first; those of one date in file order) with `added` put in, without sorting them all
    again. `above`: None when `added` follow every learning in the file, else the ids in file order before the one
    id added and where it went. In place: the `Learnings` that held the array hands it over and holds it no more,
    and its readers are done with it before a write."""
    date = arena.date
    if above is None:  # after every learning of their date: one slice per date (a burst's are of one)
        by_day: dict[str, list[int]] = {}
        for i in added:
            by_day.setdefault(date(i), []).append(i)
        for day, ids in by_day.items():
            end = _date_span(arena, by_date, day)[1]
            by_date[end:end] = array("I", ids)
        return by_date
    order, index = above
    for i in added:  # of its date, those above it in the file come first: the first one below it is where it goes
        start, end = _date_span(arena, by_date, date(i))
        if end - start == len(order):  # every learning is of its date (a day's file; a test's): no search
            at = start + index
        else:
            is_above = above_finder(order, index)
            lo, hi = start, end
            while lo < hi:
                mid = (lo + hi) // 2
                if is_above(by_date[mid]):
                    lo = mid + 1
                else:
                    hi = mid
            at = lo
        by_date.insert(at, i)
    return by_date


def _date_span(arena: Arena, by_date: array[int], day: str) -> tuple[int, int]:
    """Where the ids of `day` are in `by_date` (newest first): [start, end), empty where they would go."""
    date = arena.date
    lo, hi = 0, len(by_date)
    while lo < hi:  # the first one not newer than `day`
        mid = (lo + hi) // 2
        if date(by_date[mid]) > day:
            lo = mid + 1
        else:
            hi = mid
    start, hi = lo, len(by_date)
    while lo < hi:  # the first one older than `day`
        mid = (lo + hi) // 2
        if date(by_date[mid]) >= day:
            lo = mid + 1
        else:
            hi = mid
    return start, lo


class Ranked:
    """Learnings best first, for a read that renders only what fits its budget: `first`, then those of `rest()`
    not equal to one of them, `rest` called only if a read gets that far and `total` says it holds any (it costs
    the size of MEMORY.md). `len()` is how many there are in all (`total`), what a budget left out is counted
    from. May be read more than once."""

    def __init__(self, first: list[Learning], rest: Callable[[], Sequence[Learning]], total: int) -> None:
        self.first = first
        self._rest = rest
        self._rest_made: Sequence[Learning] | None = None
        self.total = total

    def __iter__(self) -> Iterator[Learning]:
        yield from self.first
        if self._rest_made is None and self.total <= len(self.first):
            self._rest_made = ()  # the count says the rest holds nothing new: not made (it reads every learning)
        if self._rest_made is None:
            self._rest_made = self._rest()
        if self._rest_made:
            chosen = set(self.first)
            # Made as the read reaches them: a topic that names a category may list a quarter of the file.
            yield from (learning for learning in self._rest_made if learning not in chosen)

    def __len__(self) -> int:
        return self.total
