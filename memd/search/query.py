"""The search query language, parsed here and turned into SQLite FTS5 expressions: pure, no I/O.

    jwt rotation          both words (implicit AND), stemmed: "rotating" finds "rotation"
    "signing keys"        a phrase: those words next to each other
    valid*                a prefix
    cache OR redis        either (OR binds the terms beside it: `a b OR c` is a AND (b OR c))
    -flaky                leaves out entries containing the word

Every term reaches FTS5 as a double-quoted string with its quotes doubled, so nothing a user types is read as
FTS5 syntax (NEAR, column filters, ^, parentheses, AND/NOT): a query is either parsed here into a clear
InvalidParams or it runs. Terms that hold no letter or digit (a lone `-`, `(`, `***`) are dropped, as the
tokenizer would drop them. Imports only memd.errors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from memd.errors import InvalidParams

MAX_QUERY_CHARS = 2000
MAX_TERMS = 32
TRIGRAM_MIN = 3  # the trigram index matches substrings of three characters or more; shorter ones are scanned

_SEARCHABLE = re.compile(r"[^\W_]")  # a letter or digit: what the unicode61 tokenizer keeps
_WORD = re.compile(r"[^\W_]{2,}")  # a topic word worth ranking by (context.get)


@dataclass(frozen=True, slots=True)
class Term:
    text: str  # as typed: one word (possibly `parse_day` or `JwtValidator`) or the words of a phrase
    phrase: bool = False
    prefix: bool = False


@dataclass(frozen=True, slots=True)
class Clause:
    """Terms joined by OR; an excluded clause holds exactly one term."""

    terms: tuple[Term, ...]
    excluded: bool = False


@dataclass(frozen=True, slots=True)
class Query:
    clauses: tuple[Clause, ...]  # joined by AND; at least one is not excluded

    @property
    def positive(self) -> tuple[Clause, ...]:
        return tuple(c for c in self.clauses if not c.excluded)

    @property
    def excluded(self) -> tuple[Clause, ...]:
        return tuple(c for c in self.clauses if c.excluded)

    @property
    def terms(self) -> tuple[Term, ...]:
        return tuple(t for c in self.clauses for t in c.terms)


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # "term", "or"
    term: Term | None
    excluded: bool
    at: int  # 1-based character position, for messages


def _fail(message: str, at: int | None = None) -> InvalidParams:
    where = f" (at character {at})" if at is not None else ""
    return InvalidParams(
        f'search query: {message}{where}. Syntax: words, "a phrase", prefix*, a OR b, -excluded',
        data={"param": "query"},
    )


def _tokens(text: str) -> list[_Token]:
    out: list[_Token] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
            continue
        start = i
        excluded = False
        if ch == "-" and i + 1 < n and not text[i + 1].isspace():
            excluded = True
            i += 1
        if text[i] == '"':
            close = text.find('"', i + 1)
            if close < 0:
                raise _fail("a quote is not closed", i + 1)
            inner = text[i + 1 : close]
            i = close + 1
            prefix = False
            while i < n and text[i] == "*":
                prefix, i = True, i + 1
            out.append(_Token("term", Term(" ".join(inner.split()), phrase=True, prefix=prefix), excluded, start + 1))
            continue
        while i < n and not text[i].isspace() and text[i] != '"':
            i += 1
        word = text[start + excluded : i]
        if word == "OR" and not excluded:
            out.append(_Token("or", None, False, start + 1))
            continue
        stripped = word.rstrip("*")
        out.append(_Token("term", Term(stripped, prefix=stripped != word), excluded, start + 1))
    return out


def parse(text: str) -> Query:
    """The query `text` means. Raises InvalidParams, naming what is wrong and where, for anything else."""
    if len(text) > MAX_QUERY_CHARS:
        raise _fail(f"longer than {MAX_QUERY_CHARS} characters")
    if "\x00" in text:  # FTS5 strings end at a NUL: it could never be searched for
        raise _fail("a NUL character", text.index("\x00") + 1)
    bad = next((i for i, ch in enumerate(text) if "\ud800" <= ch <= "\udfff"), None)
    if bad is not None:
        raise _fail("a lone surrogate (\\ud800-\\udfff), which is not text", bad + 1)
    tokens = _tokens(text)
    groups: list[list[_Token]] = []
    joining = False
    for token in tokens:
        if token.kind == "or":
            if not groups or joining:
                raise _fail("OR needs a term on each side", token.at)
            joining = True
            continue
        if joining:
            groups[-1].append(token)
        else:
            groups.append([token])
        joining = False
    if joining:
        raise _fail("OR needs a term on each side", tokens[-1].at)
    clauses: list[Clause] = []
    for group in groups:
        if len(group) > 1 and any(t.excluded for t in group):
            raise _fail("an excluded term (-word) cannot be part of an OR", next(t.at for t in group if t.excluded))
        kept = tuple(t.term for t in group if t.term is not None and _SEARCHABLE.search(t.term.text))
        if kept:
            clauses.append(Clause(kept, excluded=group[0].excluded))
    query = Query(tuple(clauses))
    if len(query.terms) > MAX_TERMS:
        raise _fail(f"more than {MAX_TERMS} terms")
    if not query.clauses:
        raise _fail("nothing to search for (a query needs a word with a letter or digit)")
    if not query.positive:
        raise _fail("only excluded terms; say what to search for too")
    return query


def any_of(topic: str) -> Query | None:
    """A query matching any word (two letters or digits or more) of a free-text topic; None when it has none."""
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(topic)))[:MAX_TERMS]
    if not words:
        return None
    return Query((Clause(tuple(Term(w) for w in words)),))


def _quoted(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def _expression(query: Query, render: dict[bool, str]) -> str:
    def term(t: Term) -> str:
        return _quoted(t.text) + (render[t.prefix])

    def clause(c: Clause) -> str:
        inner = " OR ".join(term(t) for t in c.terms)
        return f"({inner})" if len(c.terms) > 1 else inner

    expr = " AND ".join(clause(c) for c in query.positive)
    for c in query.excluded:
        expr = f"({expr}) NOT {clause(c)}"
    return expr


def words_match(query: Query) -> str:
    """The FTS5 MATCH expression for the stemmed word index."""
    return _expression(query, {True: " *", False: ""})


def substring_match(query: Query) -> str | None:
    """The FTS5 MATCH expression for the trigram index (every term a case-insensitive substring), or None when a
    term is too short for it (see `substring_patterns`)."""
    if any(len(t.text) < TRIGRAM_MIN for t in query.terms):
        return None
    return _expression(query, {True: "", False: ""})


def like_pattern(term: Term) -> str:
    """A LIKE pattern (escape character `\\`) finding `term` as a substring: the scan for terms too short for
    trigrams (a two-character CJK word)."""
    escaped = term.text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"
