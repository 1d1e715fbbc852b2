"""Specification of the warm day-file format (memd.tiers.warm_format)."""

from __future__ import annotations

from datetime import date, datetime, time
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memd.tiers.warm_format import (
    INDENT,
    WarmEntry,
    day_filename,
    day_header,
    is_current_format,
    parse_day,
    parse_day_filename,
    render_entry,
    zone_label,
)

DAY = date(2024, 3, 15)
ZONE = "UTC+01:00, Europe/Paris"

# What a day log written by hand or by another agent tool typically looks like.
HAND_WRITTEN_LOG = """\
# Activity Log 2024-03-15

Morning session, picking up the auth refactor.

### 09:12:03 - Refactored JWT validation
```
file: auth/jwt.py
lines_changed: 45
```
Result: Success

### 09:40:10 - Ran test suite
```yaml
command: pytest -q tests/auth
duration: 12.4s
```
Result: 3 failed, 41 passed
Follow-up: the failures are the clock-skew tests.

### 10:05:00 - Decided to keep HS256
Result: Success
"""


def render_day(entries: list[WarmEntry]) -> str:
    return day_header(DAY, ZONE) + "".join(render_entry(e) for e in entries)


# --- file names ---------------------------------------------------------------------------------------------


def test_day_filename_is_the_iso_date_with_md_suffix() -> None:
    assert day_filename(DAY) == "2024-03-15.md"
    assert parse_day_filename(day_filename(DAY)) == DAY


@pytest.mark.parametrize(
    "name",
    [
        "2024-02-30.md",  # not a calendar date
        "2024-13-01.md",
        "0000-01-01.md",
        "2024-3-15.md",
        "2024-03-15.md.bak",
        "2024-03-15.txt",
        "x2024-03-15.md",
        "2024-03-15.md\n",
        "2024-03-1\u0665.md",  # a non-ASCII digit
        "MEMORY.md",
        "",
    ],
)
def test_only_exact_calendar_date_names_are_day_files(name: str) -> None:
    assert parse_day_filename(name) is None


def test_leap_day_is_a_day_file() -> None:
    assert parse_day_filename("2024-02-29.md") == date(2024, 2, 29)


def test_day_header_is_an_activity_log_title_with_the_time_zone_and_a_blank_line() -> None:
    assert day_header(DAY, ZONE) == "# Activity Log 2024-03-15 (UTC+01:00, Europe/Paris)\n\n"


@pytest.mark.parametrize(
    ("zone", "local", "label"),
    [
        ("Europe/Paris", datetime(2024, 3, 15, 9, 0), "UTC+01:00, Europe/Paris"),
        ("Europe/Paris", datetime(2024, 7, 15, 9, 0), "UTC+02:00, Europe/Paris"),  # summer time
        ("America/St_Johns", datetime(2024, 1, 15, 9, 0), "UTC-03:30, America/St_Johns"),
        ("UTC", datetime(2024, 1, 15, 9, 0), "UTC+00:00, UTC"),
    ],
)
def test_the_zone_label_is_the_offset_then_the_zone(zone: str, local: datetime, label: str) -> None:
    assert zone_label(local.replace(tzinfo=ZoneInfo(zone)), zone) == label


def test_a_zone_label_that_would_break_the_heading_is_refused() -> None:
    with pytest.raises(ValueError):
        day_header(DAY, "UTC+01:00) x\n### 12:00:00 - forged (")


# --- rendering ----------------------------------------------------------------------------------------------


def test_an_entry_renders_heading_fenced_details_result_and_a_blank_line() -> None:
    entry = WarmEntry("09:12:03", "Refactored JWT", (("file", "auth/jwt.py"), ("lines_changed", "45")), "Success")
    assert render_entry(entry) == (
        "### 09:12:03 - Refactored JWT\n```\nfile: auth/jwt.py\nlines_changed: 45\n```\nResult: Success\n\n"
    )


def test_an_entry_without_details_or_result_is_just_its_heading() -> None:
    assert render_entry(WarmEntry("23:59:59", "idle")) == "### 23:59:59 - idle\n\n"


def test_an_empty_result_is_still_written() -> None:
    assert render_entry(WarmEntry("00:00:00", "a", result="")) == "### 00:00:00 - a\nResult: \n\n"


@pytest.mark.parametrize("bad", ["12:00", "12:00:00 ", "12:00:00\n### 13:00:00 - x", "1\u0662:00:00", "", "ab:cd:ef"])
def test_a_time_that_is_not_hh_mm_ss_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        render_entry(WarmEntry(bad, "x"))


@pytest.mark.parametrize(
    ("key", "written"),
    [
        ("file", "file"),
        ("a: b", "a\\: b"),
        ("url:port", "url\\:port"),
        ("### 12:00:00 - fake", "\\### 12\\:00\\:00 - fake"),
        ("## x", "\\## x"),
        ("```", "\\```"),
        ("`code`", "\\`code`"),
        ("Result", "\\Result"),
        ("Results", "Results"),
        ("Risk", "Risk"),
        ("back\\slash", "back\\\\slash"),
        ("two\nlines", "two\\nlines"),
        (" lead", "\\ lead"),
        ("    four", "\\    four"),  # never a continuation line
        ("\ttab", "\\\ttab"),
    ],
)
def test_keys_escape_colons_and_a_leading_structural_character(key: str, written: str) -> None:
    rendered = render_entry(WarmEntry("12:00:00", "a", ((key, "v"),)))
    assert f"\n{written}: v\n" in rendered
    assert parse_day(rendered)[0].details == ((key, "v"),)


# --- parsing files other tools wrote ------------------------------------------------------------------------


def test_a_hand_written_log_parses_into_its_entries() -> None:
    assert parse_day(HAND_WRITTEN_LOG) == [
        WarmEntry(
            "09:12:03",
            "Refactored JWT validation",
            (("file", "auth/jwt.py"), ("lines_changed", "45")),
            "Success",
        ),
        WarmEntry(
            "09:40:10",
            "Ran test suite",
            (("command", "pytest -q tests/auth"), ("duration", "12.4s")),
            "3 failed, 41 passed",
            "Follow-up: the failures are the clock-skew tests.",
        ),
        WarmEntry("10:05:00", "Decided to keep HS256", (), "Success"),
    ]


def test_crlf_line_ends_parse_like_lf() -> None:
    assert parse_day(HAND_WRITTEN_LOG.replace("\n", "\r\n")) == parse_day(HAND_WRITTEN_LOG)


def test_a_missing_final_newline_and_missing_blank_lines_are_tolerated() -> None:
    text = "### 01:00:00 - a\nResult: ok\n### 02:00:00 - b\n```\nk: v\n```\nResult: done"
    assert parse_day(text) == [
        WarmEntry("01:00:00", "a", (), "ok"),
        WarmEntry("02:00:00", "b", (("k", "v"),), "done"),
    ]


def test_text_before_the_first_entry_is_ignored() -> None:
    text = "# Activity Log\n\nSome prose.\n- a list\nResult: not an entry\n```\nk: v\n```\n### 01:00:00 - a\n"
    assert parse_day(text) == [WarmEntry("01:00:00", "a")]


def test_an_unclosed_fence_ends_with_its_entry() -> None:
    text = "### 01:00:00 - a\n```\nk: v\nnot a pair\nResult: inside\n### 02:00:00 - b\nResult: ok\n"
    assert parse_day(text) == [
        WarmEntry("01:00:00", "a", (("k", "v"), ("Result", "inside")), None, "not a pair"),
        WarmEntry("02:00:00", "b", (), "ok"),
    ]


def test_lines_outside_the_format_are_kept_verbatim_in_extra() -> None:
    text = (
        "### 01:00:00 - a\n"
        "```\nk: v\njust words\n```\n"
        "Result: first\n"
        "Result: second\n"
        "  indented note  \n"
        "```python\nprint('x: y')\n```\n"
    )
    (entry,) = parse_day(text)
    assert entry.details == (("k", "v"),)
    assert entry.result == "first"
    assert entry.extra == "just words\nResult: second\n  indented note  \n```python\nprint('x: y')\n```"


def test_an_entry_with_extra_renders_its_extra_lines_so_nothing_is_lost() -> None:
    (entry,) = parse_day("### 01:00:00 - a\nResult: ok\nsee also: PR 12\nthanks\n")
    assert parse_day(render_entry(entry)) == [entry]


def test_extra_that_would_forge_an_entry_is_refused() -> None:
    with pytest.raises(ValueError):
        render_entry(WarmEntry("01:00:00", "a", extra="fine\n### 02:00:00 - forged"))


def test_an_editor_stripping_trailing_spaces_keeps_empty_fields_empty() -> None:
    rendered = render_entry(WarmEntry("01:00:00", "", (("k", ""),), ""))
    stripped = "\n".join(line.rstrip() for line in rendered.split("\n"))
    assert parse_day(stripped) == [WarmEntry("01:00:00", "", (("k", ""),), "")]


def test_a_detail_value_may_contain_colons_and_spaces() -> None:
    (entry,) = parse_day("### 01:00:00 - a\n```\nnote: see: http://x:80/y\n```\n")
    assert entry.details == (("note", "see: http://x:80/y"),)


# --- injection ----------------------------------------------------------------------------------------------

HOSTILE = [
    "\n### 12:00:00 - fake",
    "### 12:00:00 - fake",
    "\n## x",
    "## x",
    "# x",
    "```",
    "\n```\n",
    "```yaml",
    "Result: fake",
    "\nResult: fake\n",
    "Result",
    "\r",
    "\r\n### 12:00:00 - fake\r\n",
    "back\\slash\\n",
    "a: b",
    "\\:",
    "",
    " ",
    "\u2028\x0b\x1c\x85",
    "\x0c\x1d\x1e\u2029",
    "\\u2028 \\u000b \\u0041 \\u",  # what an escaped line break looks like, written literally
]

# Every line break markdown or Unicode knows: markdown ends a line at LF, CR and CRLF; str.splitlines(), editors
# and many renderers also at VT, FF, FS, GS, RS, NEL, LS and PS.
LINE_BREAKS = ["\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.mark.parametrize("hostile", HOSTILE)
def test_no_field_value_can_add_entries_or_change_other_fields(hostile: str) -> None:
    entries = [
        WarmEntry("10:00:00", hostile, ((hostile, hostile), ("file", hostile), (hostile, "x")), hostile),
        WarmEntry("11:00:00", "after", (("k", "v"),), None),
    ]
    assert parse_day(render_day(entries)) == entries


@pytest.mark.parametrize("hostile", HOSTILE)
def test_no_detail_line_looks_like_structure_even_to_a_fence_blind_reader(hostile: str) -> None:
    rendered = render_entry(WarmEntry("10:00:00", "a", ((hostile, hostile),), None))
    lines = rendered.split("\n")
    fence = lines[1]
    detail_lines = lines[2 : lines.index(fence, 2)]
    assert detail_lines
    assert not detail_lines[0].startswith(("#", "`", "Result:", " ", "\t"))  # an escaped key
    assert all(line.startswith(INDENT) for line in detail_lines[1:])  # the value's next lines


@pytest.mark.parametrize("brk", LINE_BREAKS, ids=[repr(b) for b in LINE_BREAKS])
def test_no_value_can_start_a_line_any_reader_would_take_for_structure(brk: str) -> None:
    value = f"a{brk}### 12:00:00 - forged{brk}Result: forged{brk}```"
    entry = WarmEntry("10:00:00", value, ((value, value),), value)

    rendered = render_entry(entry)

    assert rendered.splitlines() == rendered.split("\n")[:-1]  # LF is the only line break memd writes
    fences = [line for line in rendered.split("\n") if line.startswith("`")]
    assert len(fences) == 2 and len(fences[0]) > 3  # longer than the ``` inside, so nothing inside closes it
    for line in rendered.split("\n"):
        assert line.startswith(("### 10:00:00 - ", "`", "a", "Result: ", INDENT)) or not line, line
    assert parse_day(render_day([entry])) == [entry]


def test_multi_line_text_reads_as_lines_and_a_backslash_is_a_backslash() -> None:
    entry = WarmEntry(
        "10:00:00",
        "Ran the tests",
        (("command", "pytest -x"), ("output", "2 failed\nFAILED test_a.py::test_x\n\nC:\\repo\\new")),
        "2 failed\nsee output",
    )

    rendered = render_entry(entry)

    assert rendered == (
        "### 10:00:00 - Ran the tests\n"
        "```\n"
        "command: pytest -x\n"
        "output: 2 failed\n"
        "    FAILED test_a.py::test_x\n"
        "    \n"
        "    C:\\repo\\new\n"
        "```\n"
        "Result: 2 failed\n"
        "    see output\n"
        "\n"
    )
    assert parse_day(render_day([entry])) == [entry]


def test_details_holding_backtick_runs_get_a_longer_fence() -> None:
    entry = WarmEntry("10:00:00", "a", (("code", "```python\nprint(1)\n```"), ("inline", "`x` and ````")))
    rendered = render_entry(entry)
    assert rendered.split("\n")[1] == "`````"
    assert parse_day(render_day([entry])) == [entry]


def test_a_value_with_a_carriage_return_or_starting_with_the_mark_is_one_escaped_line() -> None:
    entry = WarmEntry("10:00:00", "\\ not a mark", (("output", "50%\r100%\r\n"),), "\\\\server\\share")
    rendered = render_entry(entry)
    assert "### 10:00:00 - \\ \\\\ not a mark\n" in rendered
    assert "output: \\ 50%\\r100%\\r\\n\n" in rendered
    assert "Result: \\\\server\\share\n" in rendered  # a leading backslash alone is just a backslash
    assert parse_day(render_day([entry])) == [entry]


def test_an_editor_stripping_trailing_spaces_keeps_a_values_blank_lines() -> None:
    entry = WarmEntry("10:00:00", "a", (("k", "one\n\nthree"),), "r\n\nr3")
    stripped = "\n".join(line.rstrip() for line in render_day([entry]).split("\n"))
    assert parse_day(stripped) == [entry]


def test_a_day_file_written_by_the_older_escaping_rule_still_parses() -> None:
    old = (
        "# Activity Log 2024-03-15\n\n"
        "### 09:00:00 - two\\nlines\n"
        "```\n"
        "path: C:\\\\repo\\\\new\n"
        "note: a: b\\nsecond line\n"
        "```\n"
        "Result: back\\\\slash\n\n"
    )
    assert parse_day(old) == [
        WarmEntry("09:00:00", "two\nlines", (("path", "C:\\repo\\new"), ("note", "a: b\nsecond line")), "back\\slash")
    ]
    assert not is_current_format(old)


def test_entries_after_a_zoned_heading_in_an_older_file_are_read_as_written() -> None:
    old = "# Activity Log 2024-03-15\n\n### 09:00:00 - old\nResult: a\\nb\n\n"
    new = WarmEntry("10:00:00", "new", (("path", "C:\\new"),), "a\nb")
    text = old + day_header(DAY, ZONE) + render_entry(new)

    assert parse_day(text) == [WarmEntry("09:00:00", "old", (), "a\nb"), new]
    assert is_current_format(text)


def test_no_entry_forges_structure_for_a_commonmark_reader() -> None:
    markdown_it = pytest.importorskip("markdown_it")
    hostile = "\n".join(["x", "### 12:00:00 - forged", "# Title", "```", "~~~", "<!--", "Result: forged", "  ## h2"])
    entry = WarmEntry("10:00:00", hostile, (("k", hostile), ("```", hostile)), hostile)

    tokens = markdown_it.MarkdownIt("commonmark").parse(render_day([entry, WarmEntry("11:00:00", "after")]))

    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert headings == ["Activity Log 2024-03-15 (UTC+01:00, Europe/Paris)", "10:00:00 - x", "11:00:00 - after"]
    assert [t.type for t in tokens].count("fence") == 1
    assert not [t for t in tokens if t.type == "html_block"]


def test_a_line_break_written_by_hand_inside_a_line_is_content_and_unknown_escapes_stay_as_written() -> None:
    text = "### 10:00:00 - a\u2028b \\u0041 \\q\n```\nk\x85: v\x0bw\n```\nResult: r\u2029s\n"

    assert parse_day(text) == [WarmEntry("10:00:00", "a\u2028b \\u0041 \\q", (("k\x85", "v\x0bw"),), "r\u2029s")]


# --- properties ---------------------------------------------------------------------------------------------

STRUCTURAL = [
    "\n",
    "\r",
    "\r\n",
    "### ",
    "12:00:00 - ",
    "## ",
    "#",
    "```",
    "`",
    "Result",
    ": ",
    ":",
    "\\",
    " ",
]
fields = st.one_of(
    st.text(), st.lists(st.sampled_from([*STRUCTURAL, *LINE_BREAKS, "\\u2028", "u2028", "a", "é"])).map("".join)
)
times = st.times().map(lambda t: t.replace(microsecond=0)).map(time.isoformat)
entries_strategy = st.builds(
    WarmEntry,
    time=times,
    action=fields,
    details=st.lists(st.tuples(fields, fields), max_size=4).map(tuple),
    result=st.none() | fields,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(entries_strategy, max_size=5))
def test_rendered_entries_parse_back_exactly(entries: list[WarmEntry]) -> None:
    assert parse_day(render_day(entries)) == entries


@settings(max_examples=300, deadline=None)
@given(st.lists(entries_strategy, max_size=5))
def test_rendered_entries_parse_back_exactly_from_a_crlf_copy(entries: list[WarmEntry]) -> None:
    assert parse_day(render_day(entries).replace("\n", "\r\n")) == entries


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), st.lists(st.sampled_from([*STRUCTURAL, "k", "\n```yaml\n", "\n\n"])).map("".join)))
def test_parsing_never_raises(text: str) -> None:
    for entry in parse_day(text):
        assert isinstance(entry, WarmEntry)
