"""What an edit of `cold/MEMORY.md` adds to its token count, counted at its seams rather than over the whole file:
an insertion (`inserted_tokens`), blocks appended at the end (`appended_tokens`). The tokenizer merges across line
ends (a run of line ends and blank lines' spaces is one token, punctuation takes the line ends after it), so each
count takes in the neighbouring lines back and on to one with more than whitespace (`seam_start`, `seam_end`):
the result is exactly what a full recount's difference would be. Pure but for the counter. Imports memd.tokens.
"""

from __future__ import annotations

from memd.tokens import TokenCounter


def inserted_tokens(counter: TokenCounter, old: str, at: int, added: str) -> int:
    """Tokens an insertion of `added` at `at` into `old` added, counted with the neighbouring lines so merges at
    the seams (a blank line next to a new section) come out exactly as a full recount would."""
    before = old[seam_start(old, at) : at]
    after = old[at : seam_end(old, at)]
    return counter.count(before + added + after) - counter.count(before + after)


def appended_tokens(counter: TokenCounter, line: str, added: str) -> int:
    """Tokens `added` adds after a text whose seam at its end is `line` (`seam_start` of its end on)."""
    return counter.count(line + added) - counter.count(line)


def seam_start(text: str, at: int) -> int:
    """Where the count of an edit at `at` of `text` starts: the line before `at`, and back over lines of whitespace
    only to one with more. The tokenizer takes a run of line ends (and blank lines' spaces) as one token, and
    punctuation with the line ends after it: a seam next to a blank line reaches past it."""
    start = text.rfind("\n", 0, max(at - 1, 0)) + 1
    while start > 0 and not text[start:at].strip():
        start = text.rfind("\n", 0, start - 1) + 1
    return start


def seam_end(text: str, at: int) -> int:
    """Where the count of an edit at `at` of `text` ends: the end of the line at `at`, and on over lines of
    whitespace only to the end of one with more (see `seam_start`)."""
    end = text.find("\n", at)
    end = len(text) if end < 0 else end + 1
    while end < len(text) and not text[at:end].strip():
        after = text.find("\n", end)
        end = len(text) if after < 0 else after + 1
    return end
