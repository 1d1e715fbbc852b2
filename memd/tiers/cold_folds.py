"""The fold of the blocks a burst of learnings appended to `cold/MEMORY.md` back under their sections, as text:
made in a worker (`prepare`: folded, counted and parsed off the loop), then made good on the loop for the text as
it is by then (`made_good`: learnings appended meanwhile follow it, in their blocks). The cold store holds the
run and writes the fold (memd.tiers.cold_store); memd.cold_fold decides when. Imports memd.tokens, the cold
format, the cold learnings and memd.tiers.cold_tokens.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from memd.tiers import cold_format
from memd.tiers.cold_learnings import Learnings
from memd.tiers.cold_tokens import appended_tokens, inserted_tokens, seam_start
from memd.tokens import TokenCounter


@dataclass(frozen=True)
class Head:
    """A fold as it was made, with the size and digest of its UTF-8 bytes and whether it holds no fence marker:
    once written it is the unchanging start of the file (a burst only appends after it), so the cold store may let
    go of it and read it back, checked (memd.tiers.cold_store.Released)."""

    text: str
    size: int
    digest: bytes
    fence_free: bool


@dataclass(frozen=True)
class Fold:
    """MEMORY.md with the learnings a burst appended folded back (cold_format.fold_appended), its tokens counted
    and its learnings parsed off the loop: `text` is the fold of `base`; `parsed` None when it could not be
    carried; `run_start` where blocks appended after the fold was made begin in `text` (None: there are none);
    `head` the fold as made, which `text` starts with (None: not known)."""

    base: str
    text: str
    tokens: int
    parsed: Learnings | None
    run_start: int | None = None
    head: Head | None = None


def digest_of(data: bytes) -> bytes:
    """The digest a `Head` (and a read-back of one) is checked by."""
    return hashlib.blake2b(data, digest_size=16).digest()


def prepare(
    counter: TokenCounter, text: str, run_start: int, known: Learnings | None = None, tokens: int | None = None
) -> Fold | None:
    """In a worker: `text` with the blocks appended from `run_start` on folded back, counted and parsed (off the
    loop: a parse, or a count of a big file, must not hold it). None when the run is not blocks as memd appends
    them (nothing memd would fold: it is not memd's run). `known`: the learnings of `text` the store holds, moved
    where the fold puts them (Learnings.folded), else parsed anew. `tokens`: the store's count of `text`, carried
    to the fold by what the run and the fold's insertions add (`_fold_tokens`); None: the folded text is counted
    whole."""
    run = text[run_start:]
    blocks = cold_format.parse_appended(run)
    if blocks is None:
        return None
    base = text[:run_start]
    folded, steps = cold_format.fold_appended_steps(base, blocks)
    parsed = known.folded(run_start, steps) if known is not None else None
    if parsed is None:
        parsed = Learnings.parse(folded)
    counted = counter.count(folded) if tokens is None else _fold_tokens(counter, tokens, base, run, steps)
    data = folded.encode("utf-8")  # ~1 ms for 1.4 MB, here in the worker rather than when the store lets go of it
    head = Head(folded, len(data), digest_of(data), not cold_format.may_fence(folded))
    return Fold(text, folded, counted, parsed, head=head)


def _fold_tokens(counter: TokenCounter, tokens: int, base: str, run: str, steps: Sequence[tuple[str, int, str]]) -> int:
    """The tokens of a fold of `base + run` (counted `tokens`) whose insertions into `base` are `steps`: the run's
    share taken off as an append counted it (with `base`'s last line), each insertion's added as a learning's is.
    What the fold adds is counted, not the file: a count of a 3 MB MEMORY.md (80,000 learnings) is ~0.3 s of a
    worker per fold, a third of a burst's CPU."""
    tokens -= appended_tokens(counter, base[seam_start(base, len(base)) :], run)
    for before, at, added in steps:
        tokens += inserted_tokens(counter, before, at, added)
    return tokens


def made_good(counter: TokenCounter, fold: Fold, current: str, run_start: int | None) -> Fold | None:
    """On the loop: `fold` made good for `current`, the text now, whose run begins at `run_start`. Learnings
    appended since the fold was prepared follow it, in their blocks (`run_start` of the result says where; the
    next fold takes them back). None when `current` is not `fold.base` followed by such blocks (a person's edit
    since, adopted: the next fold starts from it)."""
    if current is fold.base or current == fold.base:  # (the same text read again is another object)
        return Fold(current, fold.text, fold.tokens, fold.parsed, head=fold.head)
    if run_start is None or len(current) <= len(fold.base) or not current.startswith(fold.base):
        return None
    suffix = current[len(fold.base) :]
    if not suffix.startswith("\n## ") or cold_format.parse_appended(suffix) is None:
        return None
    if not fold.text.endswith("\n"):  # the blocks were appended after a line end the fold does not have
        suffix = "\n" + suffix
    text = fold.text + suffix
    tokens = fold.tokens + inserted_tokens(counter, fold.text, len(fold.text), suffix)
    parsed = fold.parsed.inserted(fold.text, len(fold.text), suffix) if fold.parsed is not None else None
    return Fold(current, text, tokens, parsed, run_start=len(fold.text), head=fold.head)
