"""Where the cold store's learnings are held (memd.tiers.cold_learnings): by id, without an object per learning.

A MEMORY.md gains tens of thousands of learnings a day under a busy agent, and a `Learning` tuple with its text
string was ~140 bytes of Python objects each. An `Arena` holds each learning's text joined with the others of its
block of BLOCK, and its date and category as 2-byte ids of process-wide name tables (`Names`); a `Learning` is made
when a read reaches it (`Arena.learning`, `Picked`). Ids are only added. `ByText` finds the ids holding a text
by a 32-bit hash; `position_finder`/`above_finder` find ids in an array of them by its bytes. Pure: no I/O.
Imports the cold format (Learning).
"""

from __future__ import annotations

import bisect
import struct
import threading
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import overload

from memd.tiers.cold_format import Learning

BLOCK_BITS = 9
BLOCK = 1 << BLOCK_BITS  # learnings per arena block: what one addition copies of the block it extends
ID = struct.Struct("=I")  # an id as array("I") holds it, to find one in the bytes of an array of ids
LOW_32 = 0xFFFFFFFF
_new_learning = tuple.__new__  # Learning(...) without its __new__'s Python frame: reads make thousands


class Names:
    """Small ints for the few distinct strings many learnings share (dates, categories), for the life of the
    process: a file holds a few hundred dates and categories, each on thousands of lines."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._ids: dict[str, int] = {}
        self._lock = threading.Lock()  # a fold parses in a worker while the loop inserts

    def id(self, name: str) -> int:
        found = self._ids.get(name)
        if found is None:
            with self._lock:
                found = self._ids.get(name)
                if found is None:
                    found = self._ids[name] = len(self.names)
                    self.names.append(name)
        return found


DATES = Names()
CATEGORIES = Names()


class Block:
    """Up to BLOCK learnings of an arena: their texts, each followed by a line end, in one string (`starts[k]`
    is where text k starts, `starts[-1]` the string's length), their dates and categories as `Names` ids. Not
    changed once made: an addition makes the next block, so a reader in another thread is never disturbed."""

    __slots__ = ("categories", "dates", "starts", "text")

    def __init__(self, text: str, starts: array[int], dates: array[int], categories: array[int]) -> None:
        self.text = text
        self.starts = starts
        self.dates = dates
        self.categories = categories

    def __len__(self) -> int:
        return len(self.dates)

    def extended(self, entries: Sequence[tuple[int, int, str]]) -> Block:
        starts = array("I", self.starts)
        end = starts[-1]
        for _, _, text in entries:
            end += len(text) + 1
            starts.append(end)
        joined = self.text + "".join(text + "\n" for _, _, text in entries)
        dates = names_array(self.dates, [date for _, date, _ in entries])
        categories = names_array(self.categories, [category for category, _, _ in entries])
        return Block(joined, starts, dates, categories)

    def truncated(self, count: int) -> Block:
        return Block(
            self.text[: self.starts[count]], self.starts[: count + 1], self.dates[:count], self.categories[:count]
        )


def names_array(ids: array[int], more: list[int]) -> array[int]:
    """`ids` followed by `more`, two bytes an id while every one fits (a file has a few hundred dates and
    categories; a hostile one may have more)."""
    code = "H" if ids.typecode == "H" and (not more or max(more) <= 0xFFFF) else "I"
    grown = array(code, ids)
    grown.extend(more)
    return grown


_EMPTY_BLOCK = Block("", array("I", [0]), array("H"), array("H"))


class Arena:
    """The learnings of a lineage of `Learnings`, by id (see the module docstring). Ids are only added; an
    addition by a `Learnings` that does not hold every id there is (one made before the last addition) forks
    the arena first (`fork`: the blocks are shared, not copied)."""

    __slots__ = ("blocks", "size")

    def __init__(self, blocks: list[Block] | None = None, size: int = 0) -> None:
        self.blocks = blocks if blocks is not None else []
        self.size = size

    def add(self, entries: Sequence[tuple[int, int, str]]) -> range:
        """Add (category id, date id, text) entries; their ids."""
        first = self.size
        done = 0
        while done < len(entries):
            if self.blocks and len(self.blocks[-1]) < BLOCK:
                last = self.blocks[-1]
                take = entries[done : done + BLOCK - len(last)]
                self.blocks[-1] = last.extended(take)  # one store: a reader sees the old block or the new one
            else:
                take = entries[done : done + BLOCK]
                self.blocks.append(_EMPTY_BLOCK.extended(take))
            done += len(take)
            self.size += len(take)
        return range(first, self.size)

    def fork(self, size: int) -> Arena:
        """The arena of the first `size` ids, sharing their blocks."""
        whole, rest = divmod(size, BLOCK)
        blocks = self.blocks[:whole]
        if rest:
            blocks.append(self.blocks[whole].truncated(rest))
        return Arena(blocks, size)

    def text(self, i: int) -> str:
        block = self.blocks[i >> BLOCK_BITS]
        k = i & (BLOCK - 1)
        return block.text[block.starts[k] : block.starts[k + 1] - 1]

    def date(self, i: int) -> str:
        return DATES.names[self.blocks[i >> BLOCK_BITS].dates[i & (BLOCK - 1)]]

    def date_ranks(self) -> array[int]:
        """For each id, the rank of its date, newest 0: a sort key read in C (a sort of 36,000 ids by a Python key
        function was 4.5 ms of the loop after every fold)."""
        dates = array("I")
        for block in self.blocks:
            dates.fromlist(block.dates.tolist())
        newest_first = sorted(set(dates), key=DATES.names.__getitem__, reverse=True)
        rank_of = array("I", bytes(4 * (max(newest_first, default=0) + 1)))
        for rank, day in enumerate(newest_first):
            rank_of[day] = rank
        return array("I", map(rank_of.__getitem__, dates))

    def category(self, i: int) -> str:
        return CATEGORIES.names[self.blocks[i >> BLOCK_BITS].categories[i & (BLOCK - 1)]]

    def learning(self, i: int) -> Learning:
        block = self.blocks[i >> BLOCK_BITS]
        k = i & (BLOCK - 1)
        text = block.text[block.starts[k] : block.starts[k + 1] - 1]
        return _new_learning(Learning, (CATEGORIES.names[block.categories[k]], DATES.names[block.dates[k]], text))

    def scores(self, words: Sequence[str], categories: Iterable[str], count: int) -> dict[int, int]:
        """cold_selection.relevant's score of each of the ids below `count` that scores: 2 for each of `words`
        in its category (one of `categories`), 1 for each in its text. The text is scanned a block at a time
        with str.find, one hit per learning and word, not a learning at a time."""
        by_category = {CATEGORIES.id(c): 2 * sum(w in c.lower() for w in words) for c in categories}
        scoring = {c for c, score in by_category.items() if score}
        scores: dict[int, int] = {}
        for number, block in enumerate(self.blocks):
            base = number << BLOCK_BITS
            if base >= count:
                break
            size = min(len(block), count - base)
            starts = block.starts
            if scoring and not scoring.isdisjoint(block.categories[:size]):
                for k, category in enumerate(block.categories[:size]):
                    if category in scoring:
                        scores[base + k] = by_category[category]
            end = starts[size]
            low = block.text[:end].lower()
            if len(low) != end:  # a character that lowers to more than one: positions move, a learning at a time
                for k in range(size):
                    text = block.text[starts[k] : starts[k + 1] - 1].lower()
                    hits = sum(w in text for w in words)
                    if hits:
                        scores[base + k] = scores.get(base + k, 0) + hits
                continue
            for word in words:
                at = low.find(word, 0, end)
                while at >= 0:
                    k = bisect.bisect_right(starts, at) - 1
                    scores[base + k] = scores.get(base + k, 0) + 1
                    at = low.find(word, starts[k + 1], end)
        return scores


class Picked(Sequence[Learning]):
    """Learnings of an arena by id, made as they are read."""

    __slots__ = ("_arena", "_ids")

    def __init__(self, arena: Arena, ids: Sequence[int]) -> None:
        self._arena = arena
        self._ids = ids

    def __len__(self) -> int:
        return len(self._ids)

    @overload
    def __getitem__(self, index: int) -> Learning: ...
    @overload
    def __getitem__(self, index: slice) -> list[Learning]: ...
    def __getitem__(self, index: int | slice) -> Learning | list[Learning]:
        if isinstance(index, slice):
            return [self._arena.learning(i) for i in self._ids[index]]
        return self._arena.learning(self._ids[index])

    def __iter__(self) -> Iterator[Learning]:
        return map(self._arena.learning, self._ids)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:  # compared by content, like a list; never a key
        raise TypeError("unhashable type: 'Picked'")

    def __repr__(self) -> str:
        return f"Picked({list(self)!r})"


class ByText:
    """The ids of a `Learnings` sorted by the hash of their text (its low 32 bits): which ones hold a text,
    without a dict entry per learning (8 bytes a learning here). Changed in place by the insertions it is handed
    on through."""

    __slots__ = ("hashes", "ids")

    def __init__(self, arena: Arena, ids: Sequence[int]) -> None:
        hashes = array("I", (hash(arena.text(i)) & LOW_32 for i in ids))
        order = sorted(range(len(ids)), key=hashes.__getitem__)
        self.hashes = array("I", (hashes[n] for n in order))
        self.ids = array("I", (ids[n] for n in order))

    def add(self, arena: Arena, i: int) -> None:
        h = hash(arena.text(i)) & LOW_32
        at = bisect.bisect_right(self.hashes, h)
        self.hashes.insert(at, h)
        self.ids.insert(at, i)

    def holding(self, arena: Arena, text: str) -> list[int]:
        """The ids whose text is `text`."""
        h = hash(text) & LOW_32
        at = bisect.bisect_left(self.hashes, h)
        found = []
        while at < len(self.hashes) and self.hashes[at] == h:
            if arena.text(self.ids[at]) == text:
                found.append(self.ids[at])
            at += 1
        return found


def same_ids(arena: Arena, other: Arena, count: int) -> bool:
    """Do the ids below `count` hold the same learnings in both? Told from the blocks they share, and the few a
    fork made since compared learning by learning; False when more differ (another parse: not worth reading)."""
    if arena is other:
        return True
    blocks = (count + BLOCK - 1) >> BLOCK_BITS
    if len(arena.blocks) < blocks or len(other.blocks) < blocks:
        return False
    differing = [n for n in range(blocks) if arena.blocks[n] is not other.blocks[n]]
    if len(differing) > 2:
        return False
    return all(
        arena.learning(i) == other.learning(i)
        for n in differing
        for i in range(n << BLOCK_BITS, min((n + 1) << BLOCK_BITS, count))
    )


def position_finder(order: array[int]) -> Callable[[int], int]:
    """Where an id is in `order` (it must be there): found in the array's bytes (memchr-fast), not a Python loop."""
    data = order.tobytes()

    def position(i: int) -> int:
        needle = ID.pack(i)
        at = data.find(needle)
        while at % ID.size and at >= 0:
            at = data.find(needle, at + 1)
        if at < 0:
            raise ValueError(f"id {i} is not among these learnings")
        return at // ID.size

    return position


def above_finder(order: array[int], index: int) -> Callable[[int], bool]:
    """Is an id among the first `index` of `order`? Looked for in those ids' bytes only (memchr-fast)."""
    data = order.tobytes()
    limit = index * ID.size

    def is_above(i: int) -> bool:
        needle = ID.pack(i)
        at = data.find(needle, 0, limit)
        while at % ID.size and at >= 0:
            at = data.find(needle, at + 1, limit)
        return at >= 0

    return is_above
