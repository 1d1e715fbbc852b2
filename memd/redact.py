"""Credential scrubbing for text that leaves the machine (contract 7: secrets stay home).

`redact()` is applied to every text before it is sent to a remote LLM, and to the LLM's reply before it is
stored: agent notes carry pasted .env files, curl commands, logs, configs and sentences such as "the password is
...", and a credential in them must not reach a third party. Each secret is replaced by a typed placeholder,
`[REDACTED:<kind>]`, so the summary can still say that a key or password was involved; for `key=value`
assignments, URLs and `user:password` pairs only the value or the password is replaced and the key, user and
host stay. docs/checkpoints.md lists the kinds and the false-positive policy; tests/secrets_corpus.py is the
specification (a true positive per format, near misses that must survive).

memd.redact_rules says what counts as a secret and in which order the rules apply; this module runs them. A span
claimed by an earlier rule is never touched again, so nothing is redacted twice, and an existing placeholder is
never redacted: `redact` is idempotent.

Speed: a rule is tried only where one of its anchors (literal strings) occurs, found with `str.find` (each anchor
is searched once per text, shared by the rules that use it), and its pattern is matched there. Matching stays
linear in the input size: no pattern backtracks over the whole text, and a long match that is turned down
consumes its span (tests/unit/test_redact.py feeds it megabytes of near-misses). No I/O, no state, no
randomness: the same text always gives the same result.

Imports memd.redact_rules only.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field

from memd.redact_rules import KINDS, RULES, Rule

PLACEHOLDER = "[REDACTED:{kind}]"
_PLACEHOLDER_RE = re.compile(r"\[REDACTED:[a-z_]{1,40}\]")


@dataclass(frozen=True)
class Redaction:
    text: str
    counts: dict[str, int] = field(default_factory=dict)


__all__ = ["KINDS", "PLACEHOLDER", "Redaction", "redact"]

_ASCII_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}


def redact(text: str) -> Redaction:
    """Replace every credential in `text` by `[REDACTED:<kind>]`; counts say how many of each kind."""
    # Placeholders already in the text (a summary of summaries) are claimed first, as opaque: never redacted
    # again and never part of another match, such as a URL whose "user:password" straddles one.
    spans: list[tuple[int, int, str | None]] = [(*m.span(), None) for m in _PLACEHOLDER_RE.finditer(text)]
    starts = [start for start, _, _ in spans]
    folded = text.lower()
    if len(folded) != len(text):  # a character whose lower case is longer (İ): fold ASCII only, offsets kept
        folded = text.translate(_ASCII_LOWER)
    found: dict[tuple[bool, str], list[int]] = {}  # where each anchor occurs, shared by the rules that use it
    for rule in RULES:
        for start, end in _matches(rule, folded if rule.folded else text, text, found):
            i = bisect_left(starts, start)
            if (i > 0 and spans[i - 1][1] > start) or (i < len(spans) and spans[i][0] < end):
                continue  # claimed by an earlier, more specific rule
            starts.insert(i, start)
            spans.insert(i, (start, end, rule.kind))
    counts: dict[str, int] = {}
    out: list[str] = []
    pos = 0
    for start, end, kind in spans:
        if kind is None:
            continue
        out.append(text[pos:start])
        out.append(PLACEHOLDER.format(kind=kind))
        counts[kind] = counts.get(kind, 0) + 1
        pos = end
    if not counts:
        return Redaction(text, {})
    out.append(text[pos:])
    return Redaction("".join(out), counts)


def _matches(
    rule: Rule, haystack: str, text: str, found: dict[tuple[bool, str], list[int]]
) -> Iterator[tuple[int, int]]:
    """The secret spans of `rule`'s non-overlapping matches, tried only where an anchor occurs."""
    positions: list[int] = []
    for anchor in rule.anchors:
        occurrences = found.get((rule.folded, anchor))
        if occurrences is None:
            occurrences = found[rule.folded, anchor] = []
            at = haystack.find(anchor)
            while at >= 0:
                occurrences.append(at)
                at = haystack.find(anchor, at + 1)
        positions += occurrences
    if len(rule.anchors) > 1:
        positions = sorted(set(positions))
    done = 0
    for at in positions:
        if at - rule.back < done:
            continue  # inside the previous match of this rule
        if at < rule.back:
            continue
        match = rule.pattern.match(haystack, at - rule.back)
        if match is None:
            continue
        start, end = _secret_span(rule, match)
        if start < end and (rule.accept is None or rule.accept(text, match, start, end)):
            done = match.end()
            yield start, end
        elif match.end() - match.start() > 256:
            # A long match turned down still consumes its span, so that anchors inside it are not tried again:
            # the scan stays linear; a short one does not ("secret key = ..." is tried again at "key").
            done = match.end()


def _secret_span(rule: Rule, match: re.Match[str]) -> tuple[int, int]:
    for name in rule.groups:
        if match.group(name) is not None:
            return match.span(name)
    return match.span() if not rule.groups else (0, 0)
