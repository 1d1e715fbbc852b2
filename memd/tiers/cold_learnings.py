"""The learnings of cold/MEMORY.md as the cold store keeps them between two reads of the file.

A `Learnings` is the parse of one text: the learnings in file order and where each `## ` section starts. The
learning memd inserts (`cold.learn`, an accepted proposal) becomes a new `Learnings` without reading the rest of
the document: its section is found among the headings' offsets, and nothing else moves but the sections below
it. The lookups reads make are kept with it: by content (a topic's ranking names learnings by content), newest
first, and how many learnings each recent topic matches. Each is made at most once per text, and the ones an
insertion can update in place (by content, newest first, the counts) are handed on to the next `Learnings`, so a
read after a `cold.learn` costs what it returns, not the size of MEMORY.md. Pure: no I/O. Imports the cold
format and the cold selection (memd.tiers.cold_selection).
"""

from __future__ import annotations

import bisect
import operator
import sys
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence

from memd.textfmt import unescape_inline
from memd.tiers import cold_format, cold_selection
from memd.tiers.cold_format import Learning, Section

# The topics whose match count a `Learnings` keeps (the counts move with every insertion: one test per topic).
COUNTED_TOPICS = 64
# The most learnings an addition puts into the kept newest-first order one by one (each a list insertion, ~10 us
# at 20,000 learnings); past that the next read that needs the order sorts them all once (~2 ms at 20,000).
BY_DATE_INSERTS = 16
_DATE = operator.itemgetter(1)  # Learning.date

Content = tuple[str, str]  # (category, text)


class ByContent(Mapping[Content, Learning]):
    """The first learning of each (category, text), in file order. Kept by text alone: a (category, text) tuple
    per learning was 64 bytes more of every learning held (a text under two categories holds a tuple of them)."""

    def __init__(self) -> None:
        self._by_text: dict[str, Learning | tuple[Learning, ...]] = {}

    def __getitem__(self, key: Content) -> Learning:
        found = self._by_text.get(key[1])
        if isinstance(found, Learning):
            if found.category == key[0]:
                return found
        elif found is not None:
            for learning in found:
                if learning.category == key[0]:
                    return learning
        raise KeyError(key)

    def __iter__(self) -> Iterator[Content]:
        for text, found in self._by_text.items():
            for learning in (found,) if isinstance(found, Learning) else found:
                yield learning.category, text

    def __len__(self) -> int:
        return sum(1 if isinstance(found, Learning) else len(found) for found in self._by_text.values())

    def add(self, learning: Learning, first: bool) -> None:
        """Record `learning`; `first`: before every one recorded (else after them): it replaces one alike."""
        found = self._by_text.get(learning.text)
        if found is None:
            self._by_text[learning.text] = learning
            return
        alike = (found,) if isinstance(found, Learning) else found
        others = tuple(lr for lr in alike if lr.category != learning.category)
        if len(others) == len(alike):  # a new category for this text
            self._by_text[learning.text] = (*alike, learning)
        elif first:
            self._by_text[learning.text] = (learning, *others) if others else learning


class Learnings:
    """The learnings of one MEMORY.md text (see the module docstring). Not changed once made, but for its caches,
    which the `Learnings` an insertion makes takes over."""

    def __init__(self, items: list[Learning], sections: list[Section], count: int | None = None) -> None:
        # File order: the first `count` of `items`. Learnings added at the end share the list with the
        # Learnings before them (see appended), which reads only its own first `count`.
        self._all = items
        self._count = len(items) if count is None else count
        self._sections = sections
        self._offsets = [s.offset for s in sections]
        self._by_content: ByContent | None = None
        self._by_date: list[Learning] | None = None
        self._counts: OrderedDict[tuple[str, ...], int] = OrderedDict()
        # The learnings held more than once, and how many times (in most files none: a Counter of every learning
        # was ~30 bytes more of every learning held).
        self._copies: dict[Learning, int] | None = None

    @classmethod
    def parse(cls, text: str) -> Learnings:
        items, _, sections = cold_format.parse_sections(text)
        return cls(items, sections)

    def reuse(self, known: Learnings) -> None:
        """Hold `known`'s learning objects instead of equal ones of this parse (only on a fresh parse, before
        anyone else has it). A fold moves every learning a burst appended into its section, and its parse made
        a second copy of every learning in the file while the first was still held: the allocator kept both
        generations' memory, and the soak's RSS grew with the file twice over."""
        same = {learning: learning for learning in known.items}
        self._all[: self._count] = [same.get(learning, learning) for learning in self.items]

    # --- reads -------------------------------------------------------------------------------------------------

    @property
    def items(self) -> list[Learning]:
        """The learnings in file order (do not change the list: it may be shared)."""
        items = self._all
        return items if len(items) == self._count else items[: self._count]

    def by_content(self) -> ByContent:
        """The learnings by (category, text), the first of two alike as the file has them."""
        found = self._by_content
        if found is None:
            found = ByContent()
            for learning in reversed(self.items):
                found.add(learning, first=True)
            self._by_content = found
        return found

    def copies(self, learning: Learning) -> int:
        """How many learnings equal to `learning` (category, date and text), one of the file's, the file holds."""
        found = self._copies
        if found is None:
            found = self._copies = _repeated(self.items)
        return found.get(learning, 1)

    def newest_first(self) -> list[Learning]:
        """cold_selection.newest_first of the learnings. The list is kept, and handed to the next `Learnings` an
        insertion makes, which puts the learnings it adds into it: read it before the next write, do not change
        it."""
        found = self._by_date
        if found is None:
            found = self._by_date = cold_selection.newest_first(self.items)
        return found

    def relevant(self, topic: str | None) -> list[Learning]:
        """cold_selection.relevant of the learnings; without a topic, `newest_first()` itself (read it before the
        next write, do not change it: a copy was 320 KB per read at 40,000 learnings)."""
        categories = {"", *(section.category for section in self._sections)}
        return cold_selection.relevant(self.items, topic, self.newest_first(), categories)

    def relevant_count(self, topic: str | None) -> int:
        """len(self.relevant(topic)), counted once per topic and text and kept up to date across insertions."""
        words = tuple(cold_selection.topic_words(topic))
        if not words:
            return self._count
        count = self._counts.get(words)
        if count is None:
            matches = cold_selection.matcher(words)
            count = sum(1 for learning in self.items if matches(learning))
            self._counts[words] = count
            if len(self._counts) > COUNTED_TOPICS:
                self._counts.popitem(last=False)
        else:
            self._counts.move_to_end(words)
        return count

    # --- a fold -------------------------------------------------------------------------------------------------

    def folded(self, run_start: int, steps: Sequence[tuple[str, int, str]]) -> Learnings | None:
        """The learnings of the text a fold makes (ColdStore.prepare_fold) of the one these were parsed from, whose
        blocks from `run_start` on a burst appended: `steps` are the fold's insertions into the text before the
        run (cold_format.fold_appended_steps). Found without parsing the folded text, and holding the same learning
        objects, moved: a parse of a 1 MB MEMORY.md is ~45 ms of Python holding the GIL, and made a new object
        for every learning while the store held the old ones. None when that cannot be told this way (a text that
        may hold fences, a run that is not one learning per block): parse the folded text instead. Safe in a
        worker while the loop appends to these: only their first `count` learnings are read."""
        count = self._count
        j = bisect.bisect_left(self._offsets, run_start)
        run_sections = self._sections[j:]
        first = count - len(run_sections)
        if any(section.first != first + n for n, section in enumerate(run_sections)):
            return None
        items = self._all[:count]  # one slice: atomic under the GIL while the loop extends the list
        own = {learning: learning for learning in items[first:]}  # what the fold moves: these objects, not copies
        del items[first:]
        sections = self._sections[:j]
        for before, at, added in steps:
            if cold_format.may_fence(before) or cold_format.may_fence(added):
                return None
            if at == len(before):  # a section of its own, at the end
                found, _, headed = cold_format.parse_sections(added)
                if not headed or headed[0].first:
                    return None
                shift, above = len(before), len(items)
                sections += [Section(h.offset + shift, h.category, h.first + above) for h in headed]
                items += [own.get(learning, learning) for learning in found]
                continue
            k = bisect.bisect_left([section.offset for section in sections], at) - 1
            if k < 0 or (at and before[at - 1] != "\n") or not added.endswith("\n"):
                return None
            category = sections[k].category
            moved = []
            for raw in added[:-1].split("\n"):
                match = cold_format.learning_line(raw)
                if match is None:
                    return None
                learning = Learning(category, sys.intern(match[1]), unescape_inline(match[2] or ""))
                moved.append(own.get(learning, learning))
            start = before.find("\n", sections[k].offset) + 1
            above = sum(1 for raw in before[start:at].split("\n") if cold_format.learning_line(raw) is not None)
            index = sections[k].first + above
            items[index:index] = moved
            grown, more = len(added), len(moved)
            sections = [
                s if n <= k else Section(s.offset + grown, s.category, s.first + more) for n, s in enumerate(sections)
            ]
        if len(items) != count:  # a fold moves learnings; it adds and drops none
            return None
        return Learnings(items, sections)

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
        learning = Learning(category, sys.intern(match[1]), unescape_inline(match[2] or ""))
        grown = len(added)
        sections = [
            s if j <= k else Section(s.offset + grown, s.category, s.first + 1) for j, s in enumerate(self._sections)
        ]
        after = Learnings([*self.items[:index], learning, *self.items[index:]], sections)
        self._hand_over(after, [learning], at_end=False, index=index)
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
        new = [Learning(category, *learning[1:]) if n < first_heading else learning for n, learning in enumerate(found)]
        # Appended to the list these share with the Learnings before them, unless one made from these extended it
        # already (a fold's base, a batch planned twice): a MEMORY.md growing by bursts of learnings would
        # otherwise copy a list of every learning at each one, and those ever-larger blocks fragment the heap.
        if len(self._all) == self._count:
            self._all.extend(new)
            after = Learnings(self._all, sections, self._count + len(new))
        else:
            after = Learnings([*self.items, *new], sections)
        self._hand_over(after, new, at_end=True)
        return after

    def _hand_over(self, after: Learnings, added: list[Learning], at_end: bool, index: int = 0) -> None:
        """Give `after` (these learnings and `added`, added) the caches an addition keeps true; this one no
        longer holds them (they describe `after` now). `at_end`: added after every learning there was; else the
        one learning of `added` was inserted at `index` of these."""
        by_date, self._by_date = self._by_date, None
        if by_date is not None and len(added) <= BY_DATE_INSERTS:
            after._by_date = _by_date_after(by_date, added, None if at_end else self.items[:index])
        by_content, self._by_content = self._by_content, None
        copies, self._copies = self._copies, None
        if copies is not None:
            after._copies = _repeated_after(copies, by_content, added)
        if by_content is not None:
            for learning in added:
                if (learning.category, learning.text) not in by_content:
                    by_content.add(learning, first=False)
                elif not at_end:  # one alike already there may come first or after: made again when asked
                    by_content = None
                    break
            after._by_content = by_content
        counts, self._counts = self._counts, OrderedDict()
        for words in counts:
            matches = cold_selection.matcher(words)
            counts[words] += sum(1 for learning in added if matches(learning))
        after._counts = counts


def _by_date_after(by_date: list[Learning], added: list[Learning], above: list[Learning] | None) -> list[Learning]:
    """`by_date` (cold_selection.newest_first of some learnings) with `added` put in, without sorting them all again
    (2 ms at 20,000 learnings, at the first read after every `cold.learn`): newest first, and those of one date
    in file order. `above`: None when `added` follow every learning in the file, else the learnings above the
    one learning added. In place: the `Learnings` that held the list hands it over and holds it no more, and its
    readers are done with it before a write (a copy of every learning's place per `cold.learn`, 320 KB at 40,000
    learnings, was a cost that grew with the file)."""
    result = by_date
    for learning in added:
        start, end = _date_span(result, learning.date)
        # Of its date, those above it in the file come first (an append follows all of them).
        same_above = end - start if above is None else list(map(_DATE, above)).count(learning.date)
        result.insert(start + same_above, learning)
    return result


def _date_span(by_date: list[Learning], day: str) -> tuple[int, int]:
    """Where the learnings of `day` are in `by_date` (newest first): [start, end), empty where they would go."""
    lo, hi = 0, len(by_date)
    while lo < hi:  # the first one not newer than `day`
        mid = (lo + hi) // 2
        if by_date[mid].date > day:
            lo = mid + 1
        else:
            hi = mid
    start, hi = lo, len(by_date)
    while lo < hi:  # the first one older than `day`
        mid = (lo + hi) // 2
        if by_date[mid].date >= day:
            lo = mid + 1
        else:
            hi = mid
    return start, lo


def _repeated(items: list[Learning]) -> dict[Learning, int]:
    """The learnings `items` holds more than once, and how many times."""
    seen: set[Learning] = set()
    repeated: dict[Learning, int] = {}
    for learning in items:
        if learning in seen:
            repeated[learning] = repeated.get(learning, 1) + 1
        else:
            seen.add(learning)
    return repeated


def _repeated_after(
    repeated: dict[Learning, int], by_content: ByContent | None, added: list[Learning]
) -> dict[Learning, int] | None:
    """`repeated` (_repeated) updated for `added`, told from `by_content` as it was before them (the first
    learning of each category and text); None when that cannot tell (no lookup, or the first one alike has another
    date: an equal one may be further down): made again when asked."""
    if by_content is None:
        return None
    own: dict[Content, Learning] = {}  # the first of `added` of each category and text
    for learning in added:
        key = (learning.category, learning.text)
        first = by_content.get(key) or own.setdefault(key, learning)
        if first is learning:
            continue  # the first of its content
        if first.date != learning.date:
            return None
        repeated[learning] = repeated.get(learning, 1) + 1
    return repeated


class Ranked:
    """Learnings best first, for a read that renders only what fits its budget: `first`, then those of `rest()`
    not equal to one of them, `rest` called only if a read gets that far and `total` says it holds any (it costs
    the size of MEMORY.md). `len()` is how many there are in all (`total`), what a budget left out is counted
    from. May be read more than once."""

    def __init__(self, first: list[Learning], rest: Callable[[], list[Learning]], total: int) -> None:
        self.first = first
        self._rest = rest
        self._rest_made: list[Learning] | None = None
        self.total = total

    def __iter__(self) -> Iterator[Learning]:
        yield from self.first
        if self._rest_made is None and self.total <= len(self.first):
            self._rest_made = []  # the count says the rest holds nothing new: not made (it reads every learning)
        if self._rest_made is None:
            chosen = set(self.first)
            self._rest_made = [learning for learning in self._rest() if learning not in chosen]
        yield from self._rest_made

    def __len__(self) -> int:
        return self.total
