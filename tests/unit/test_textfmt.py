"""Specification of the escaping rule (memd.textfmt): one line out, the same value back."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memd.textfmt import LINE_BREAKS, escape_inline, neutralise_line, unescape_inline

# What str.splitlines() splits on, which is what markdown (LF, CR) and Unicode-aware readers split on.
EVERY_BREAK = "".join(ch for ch in map(chr, range(0x3000)) if len(f"a{ch}b".splitlines()) == 2)

pieces = st.sampled_from([*LINE_BREAKS, "\r\n", "\\", "\\n", "\\r", "\\u2028", "\\u000B", "\\u0041", "\\u", "u", "a"])
texts = st.one_of(st.text(), st.lists(pieces, max_size=12).map("".join))


def test_the_rule_escapes_exactly_the_characters_readers_split_lines_on() -> None:
    assert set(LINE_BREAKS) == set(EVERY_BREAK)


@pytest.mark.parametrize(
    ("value", "escaped"),
    [
        ("plain", "plain"),
        ("a\\b", "a\\\\b"),
        ("a\nb\rc", "a\\nb\\rc"),
        ("a\r\nb", "a\\r\\nb"),
        ("\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029", "\\u000b\\u000c\\u001c\\u001d\\u001e\\u0085\\u2028\\u2029"),
        ("\\u2028", "\\\\u2028"),
    ],
)
def test_values_are_written_as_documented(value: str, escaped: str) -> None:
    assert escape_inline(value) == escaped
    assert unescape_inline(escaped) == value


@pytest.mark.parametrize("written", ["\\q", "\\u0041", "\\u20", "\\u202g", "\\", "end\\", "\\:"])
def test_an_unknown_escape_written_by_hand_is_kept_as_written(written: str) -> None:
    assert unescape_inline(written) == written


def test_upper_case_hex_written_by_hand_is_understood() -> None:
    assert unescape_inline("a\\u2028b\\u000Bc") == "a\u2028b\x0bc"


def test_literal_characters_are_unescaped_only_when_asked() -> None:
    assert unescape_inline("a\\:b", literal=":") == "a:b"


@settings(max_examples=500, deadline=None)
@given(texts)
def test_an_escaped_value_is_one_line_and_reads_back_exactly(value: str) -> None:
    escaped = escape_inline(value)

    assert len(escaped.splitlines()) <= 1
    assert not set(escaped) & set(LINE_BREAKS)
    assert unescape_inline(escaped) == value


@pytest.mark.parametrize(
    "line",
    [
        "# h",
        "## Pending actions",
        "   ### x",
        "#no space",
        "```",
        "~~~ python",
        "> quoted",
        "<!-- hides the rest",
        "===",
        "-",
        "---",
        "- - -",
        "***",
        "_ _ _",
    ],
)
def test_a_line_markdown_would_read_as_structure_gets_a_backslash(line: str) -> None:
    assert neutralise_line(line) == "\\" + line


@pytest.mark.parametrize("line", ["- a bullet", "* a bullet", "prose # not a heading", "", "  indented prose", "-- x"])
def test_bullets_and_prose_are_kept(line: str) -> None:
    assert neutralise_line(line) == line


@settings(max_examples=300, deadline=None)
@given(texts)
def test_a_neutralised_line_is_one_line(value: str) -> None:
    assert len(neutralise_line(value).splitlines()) <= 1
