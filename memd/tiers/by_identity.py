"""What is made from each element of a list, remembered by the element's identity for the next list that holds it.

Every hot batch rewrites and recounts the whole hot tier, and its notes and decisions are the very objects of the
batch before, but the one it added: a hot document is never changed in place (memd.tiers.hot_format's edits copy
what they touch), so an element seen before is made into the same JSON line and the same token count again. A
lookup by `id()` costs a dict probe, where a key of the element's value (its items as a tuple, hashed) cost
about as much as encoding it. Each remembered value holds its element, so no other object can take its id while
it is remembered. Bounded: past twice the last list's length (plus SLACK), only that list's elements are kept.
Pure: no I/O, no imports of memd.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

T = TypeVar("T")

SLACK = 64  # elements kept beyond twice the last list: a checkpoint's skeletons (a subset) evict nothing


class ByIdentity(Generic[T]):
    """`make(element)` for each element of a list, remembered by identity (see the module docstring)."""

    def __init__(self, make: Callable[[Any], T]) -> None:
        self._make = make
        self._held: dict[int, tuple[Any, T]] = {}

    def __call__(self, elements: Sequence[Any]) -> list[T]:
        held = self._held
        made: list[T] = []
        for element in elements:
            hit = held.get(id(element))
            if hit is None or hit[0] is not element:
                hit = held[id(element)] = (element, self._make(element))
            made.append(hit[1])
        if len(held) > 2 * len(elements) + SLACK:
            # Rebuilt, not trimmed in place: a caller in another thread still reading the old dict finds only
            # values that are right for their elements.
            self._held = {id(element): held[id(element)] for element in elements}
        return made

    def __len__(self) -> int:
        return len(self._held)


class ByKeyAndIdentity(Generic[T]):
    """A ByIdentity per key of a document (its list fields: `make(key, element)`), so that lists written or
    counted apart (the two hot files' lists, notes and decisions) do not evict each other's elements. The caller
    bounds the keys (the hot format's known list fields)."""

    def __init__(self, make: Callable[[str, Any], T]) -> None:
        self._make = make
        self._by_key: dict[str, ByIdentity[T]] = {}

    def __call__(self, key: str, elements: Sequence[Any]) -> list[T]:
        memo = self._by_key.get(key)
        if memo is None:
            memo = self._by_key[key] = ByIdentity(functools.partial(self._make, key))
        return memo(elements)
