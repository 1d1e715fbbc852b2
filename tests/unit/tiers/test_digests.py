"""Specification of the digest set a big day's parse keeps of the entries it lets go (memd.tiers.digests): it answers
as a set of the digests' first 8 bytes would, whatever the number added, and holds them in about 8 bytes each."""

from __future__ import annotations

import hashlib
import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st

from memd.tiers import digests
from memd.tiers.digests import DigestSet


def digest(n: int) -> bytes:
    return hashlib.blake2b(str(n).encode(), digest_size=16).digest()


def test_every_digest_added_is_found_across_merges_and_no_other_is() -> None:
    kept = DigestSet()
    added = [digest(n) for n in range(5 * digests.RUN + 17)]  # several merges, and some not merged yet
    for d in added:
        kept.add(d)

    assert all(d in kept for d in added)
    assert not any(digest(-n) in kept for n in range(1, 2000))
    assert len(kept) == len(added)


def test_a_digest_added_twice_is_kept_once() -> None:
    kept = DigestSet()
    for _ in range(3):
        for n in range(digests.RUN + 5):
            kept.add(digest(n))

    assert len(kept) == digests.RUN + 5


def test_only_the_first_eight_bytes_tell_digests_apart_and_other_objects_are_never_members() -> None:
    kept = DigestSet()
    kept.add(b"12345678" + b"A" * 8)

    assert b"12345678" + b"B" * 8 in kept
    assert b"12345679" + b"A" * 8 not in kept
    assert "12345678AAAAAAAA" not in kept
    assert None not in kept


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=400), max_size=300), st.integers(0, 400), st.integers(1, 9))
def test_it_answers_as_a_set_would_through_any_number_of_merges(numbers: list[int], probe: int, run: int) -> None:
    kept = DigestSet(run=run)  # small runs: merges of every size happen within a few hundred digests
    for n in numbers:
        kept.add(digest(n))

    assert (digest(probe) in kept) == (probe in set(numbers))
    assert len(kept) == len(set(numbers))
    assert all(digest(n) in kept for n in numbers)
    sizes = [len(r) for r in kept._runs]
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == len(sizes)  # a binary counter


def test_a_hundred_thousand_digests_take_about_eight_bytes_each_where_a_set_takes_ninety() -> None:
    added = [digest(n) for n in range(100_000)]
    tracemalloc.start()
    try:
        kept = DigestSet()
        for d in added:
            kept.add(d)
        compact, peak = tracemalloc.get_traced_memory()
        plain = {bytes(bytearray(d)) for d in added}  # what it replaced: the digests themselves in a set
        both, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert compact / len(added) < 12  # sorted runs at 8 bytes, the newest in a small set
    assert peak / len(added) < 24  # a merge streams the runs: no Python int made of every member at once
    assert (both - compact) / len(plain) > 60
    assert all(d in kept for d in added[::997])
