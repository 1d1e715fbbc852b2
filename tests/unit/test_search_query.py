"""Specification of the search query language (memd.search.query): what each form means, the FTS5 expressions it
becomes, and that nothing a user types reaches FTS5 as syntax: every input is a parsed query or an InvalidParams,
and every parsed query runs on a real FTS5 table without an SQLite error.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memd.errors import InvalidParams
from memd.search import query as q
from memd.search.query import Clause, Query, Term


@pytest.fixture(scope="module")
def fts() -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE words USING fts5(heading, body, tokenize='porter unicode61')")
    conn.execute("CREATE VIRTUAL TABLE grams USING fts5(heading, body, tokenize='trigram')")
    for table in ("words", "grams"):
        conn.execute(f"INSERT INTO {table} VALUES ('Rotated the JWT signing keys', 'parse_day_filename in 数据库连接')")
    yield conn
    conn.close()


def matches(conn: sqlite3.Connection, text: str) -> tuple[int, int]:
    """How many rows the query finds as words and as substrings (0 or 1 each: the table holds one row)."""
    query = q.parse(text)
    words = conn.execute("SELECT count(*) FROM words WHERE words MATCH ?", (q.words_match(query),)).fetchone()[0]
    grams = q.substring_match(query)
    found = conn.execute("SELECT count(*) FROM grams WHERE grams MATCH ?", (grams,)).fetchone()[0] if grams else -1
    return words, found


def test_words_are_all_required_and_stemmed(fts: sqlite3.Connection) -> None:
    assert q.parse("jwt rotation") == Query((Clause((Term("jwt"),)), Clause((Term("rotation"),))))
    assert matches(fts, "rotating jwt")[0] == 1, "porter stemming: rotating ~ rotated"
    assert matches(fts, "jwt redis")[0] == 0


def test_a_phrase_keeps_its_words_together_and_in_order(fts: sqlite3.Connection) -> None:
    assert q.parse('"signing  keys"') == Query((Clause((Term("signing keys", phrase=True),)),))
    assert matches(fts, '"signing keys"')[0] == 1
    assert matches(fts, '"keys signing"')[0] == 0


def test_a_trailing_star_is_a_prefix(fts: sqlite3.Connection) -> None:
    assert q.parse("sign*") == Query((Clause((Term("sign", prefix=True),)),))
    assert matches(fts, "sign*")[0] == 1
    assert q.words_match(q.parse('"signing ke"*')) == '"signing ke" *'


def test_or_joins_the_terms_beside_it_and_a_minus_excludes(fts: sqlite3.Connection) -> None:
    parsed = q.parse("jwt redis OR keys -flaky")
    assert parsed.clauses == (
        Clause((Term("jwt"),)),
        Clause((Term("redis"), Term("keys"))),
        Clause((Term("flaky"),), excluded=True),
    )
    assert q.words_match(parsed) == '("jwt" AND ("redis" OR "keys")) NOT "flaky"'
    assert matches(fts, "jwt redis OR keys")[0] == 1
    assert matches(fts, "jwt -keys")[0] == 0


def test_identifier_and_cjk_substrings_match_through_trigrams(fts: sqlite3.Connection) -> None:
    assert matches(fts, "day_file") == (0, 1)
    assert matches(fts, "数据库") == (0, 1)
    assert q.substring_match(q.parse("数据")) is None, "under three characters: scanned, not matched by trigram"
    assert q.like_pattern(Term("50%_a\\b")) == "%50\\%\\_a\\\\b%"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('"unclosed', "a quote is not closed (at character 1)"),
        ("OR jwt", "OR needs a term on each side"),
        ("jwt OR", "OR needs a term on each side"),
        ("a OR OR b", "OR needs a term on each side"),
        ("jwt OR -keys", "an excluded term (-word) cannot be part of an OR"),
        ("-jwt -keys", "only excluded terms"),
        ("( ) * - :: ^", "nothing to search for"),
        ("", "nothing to search for"),
        ("x" * 2001, "longer than 2000 characters"),
        (" ".join(["w"] * 33), "more than 32 terms"),
        ("jwt\x00keys", "a NUL character (at character 4)"),
        ("jwt \udc80", "a lone surrogate"),
    ],
)
def test_what_cannot_be_a_query_is_a_clear_invalid_params(text: str, says: str) -> None:
    with pytest.raises(InvalidParams) as caught:
        q.parse(text)
    assert says in caught.value.message
    assert "Syntax:" in caught.value.message


@pytest.mark.parametrize(
    "text",
    [
        "NEAR(jwt keys, 2)",
        "heading:jwt",
        "{heading body}: keys",
        "^jwt",
        "jwt AND keys NOT signing",
        'say"hello"world',
        "a*b*",
        'col:"x" + - * ( ) { }',
        "'; DROP TABLE docs; --",
        '\\"x\\"',
        "\u202e\ufeff\u200b jwt",
    ],
)
def test_fts5_syntax_typed_by_a_user_is_searched_for_as_text(fts: sqlite3.Connection, text: str) -> None:
    matches(fts, text)  # no sqlite3.OperationalError: every term reached FTS5 quoted


def test_a_topic_becomes_any_of_its_words() -> None:
    assert q.any_of("How do we rotate the JWT keys? (a)") == Query(
        (Clause(tuple(Term(w) for w in ("how", "do", "we", "rotate", "the", "jwt", "keys"))),)
    )
    assert q.any_of("? - !") is None


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_any_text_is_a_query_or_an_invalid_params_and_never_an_sqlite_error(text: str) -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE words USING fts5(heading, body, tokenize='porter unicode61')")
    conn.execute("CREATE VIRTUAL TABLE grams USING fts5(heading, body, tokenize='trigram')")
    try:
        matches(conn, text)
    except InvalidParams:
        pass
    finally:
        conn.close()
