"""Documented rules restated independently of memd's code, as test oracles.

Nothing here imports memd's renderers, parsers or escaping: an oracle built from them would repeat their bugs
(a renderer and a parser that agree with each other pass every round trip). The source is docs/format.md: the
escaping table, the day file grammar, the learning line, the hot note line, and the layout of hot/context.json.
torture/verify.py uses the same oracles on what a torture run leaves on disk.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from memd.tokens import TokenCounter

# docs/format.md, "Escaping": every character a markdown or Unicode-aware reader ends a line at, and the backslash.
ESCAPES = {
    "\\": "\\\\",
    "\n": "\\n",
    "\r": "\\r",
    "\x0b": "\\u000b",
    "\x0c": "\\u000c",
    "\x1c": "\\u001c",
    "\x1d": "\\u001d",
    "\x1e": "\\u001e",
    "\x85": "\\u0085",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}
_UNESCAPE = re.compile(r"\\(\\|n|r|:|u(?:000[bcBC]|001[cdeCDE]|0085|2028|2029))")


def escape(value: str) -> str:
    return "".join(ESCAPES.get(ch, ch) for ch in value)


def unescape(text: str) -> str:
    """The reverse of `escape` (and of a key's `\\:`); an unknown escape stays as written."""

    def back(m: re.Match[str]) -> str:
        code = m.group(1)
        if code.startswith("u"):
            return chr(int(code[1:], 16))
        return {"\\": "\\", "n": "\n", "r": "\r", ":": ":"}[code]

    return _UNESCAPE.sub(back, text)


def escape_key(key: str) -> str:
    """A detail key: escaped as a value, every `:` as `\\:`, and a backslash before a leading `#`, backtick, space
    or tab and before the key that is exactly `Result`."""
    text = escape(key).replace(":", "\\:")
    if text[:1] in ("#", "`", " ", "\t") or text == "Result":
        text = "\\" + text
    return text


ESCAPED_MARK = "\\ "  # a value written as one escaped line
_ONE_LINE_ONLY = set(ESCAPES) - {"\\", "\n"}  # line breaks other than LF: a reader may split there


def value_lines(value: str) -> list[str]:
    """A warm value as the lines it is written on (docs/format.md): as it is, its second and later lines indented
    by four spaces; or, when it holds another line break or starts with the mark itself, one escaped line behind
    a backslash and a space."""
    if value.startswith(ESCAPED_MARK) or any(ch in _ONE_LINE_ONLY for ch in value):
        return [ESCAPED_MARK + escape(value)]
    return value.split("\n")


def _written(prefix: str, value: str) -> str:
    first, *more = value_lines(value)
    return f"{prefix}{first}\n" + "".join(f"    {line}\n" for line in more)


def warm_entry(time: str, action: str, details: Sequence[tuple[str, str]] = (), result: str | None = None) -> str:
    text = _written(f"### {time} - ", action)
    if details:
        block = "".join(_written(f"{escape_key(k)}: ", v) for k, v in details)
        fence = "`" * max(3, max((len(run) for run in re.findall("`+", block)), default=0) + 1) + "\n"
        text += fence + block + fence
    if result is not None:
        text += _written("Result: ", result)
    return text + "\n"


def warm_day(day: str, entries: Iterable[str], zone: str | None = None) -> str:
    """A day file as memd writes it: the header (with the zone its times are in, `UTC+01:00, Europe/Paris`), a
    blank line, then each entry (from `warm_entry`)."""
    return f"# Activity Log {day}" + (f" ({zone})" if zone else "") + "\n\n" + "".join(entries)


def learning_line(day: str, text: str) -> str:
    return f"- [{day}] {escape(text)}\n"


def note_line(note: dict[str, Any]) -> str:
    """A hot note as the context payload renders it: `- [ts] text`, or `- text` without a stamp."""
    ts = note.get("ts")
    line = f"[{ts}] {note.get('text', '')}" if ts else str(note.get("text", ""))
    return f"- {escape(line)}\n"


def recent_window(counter: TokenCounter, notes: list[dict[str, Any]], room: float) -> list[dict[str, Any]]:
    """The newest notes whose rendered lines fit in `room` tokens: what a checkpoint pins as recent
    (docs/checkpoints.md: recent_share x the hot budget)."""
    kept: list[dict[str, Any]] = []
    used = 0
    for note in reversed(notes):
        cost = counter.count_piece(note_line(note))
        if used + cost > room:
            break
        kept.insert(0, note)
        used += cost
    return kept


# --- reading back, with parsers written for the tests ---------------------------------------------------------

# A day file's first line: the date, and (since the zone was added to the format) the UTC offset and zone name.
DAY_HEADER = re.compile(r"# Activity Log [0-9]{4}-[0-9]{2}-[0-9]{2}(?: \(UTC[+-][0-9]{2}:[0-9]{2}, [^)\n]+\))?")
_ENTRY_HEAD = re.compile(r"### ([0-2][0-9]:[0-5][0-9]:[0-5][0-9]) - (.*)")
_DETAIL = re.compile(r"((?:[^\\:]|\\.)*?): (.*)")  # the key ends at the first `: ` not escaped by a backslash
_LEARNING = re.compile(r"- \[([0-9]{4}-[0-9]{2}-[0-9]{2})\] (.*)")


def read_warm_day(text: str) -> tuple[list[tuple[str, str, list[tuple[str, str]], str | None]], list[str]]:
    """Entries of a day file memd wrote, as (time, action, details, result) with values read back, and every
    departure from the grammar memd writes (docs/format.md: header, blank line, then per entry a heading, an
    optional fenced block of `key: value` lines, an optional `Result:` line, the lines another tool added to
    the entry if any, and a blank line; a value's later lines indented by four spaces). A header without a zone
    marks the older rule: every value one escaped line."""
    problems: list[str] = []
    entries: list[tuple[str, str, list[tuple[str, str]], str | None]] = []
    if not text:
        return entries, problems
    if not text.endswith("\n"):
        problems.append("no final newline")
    lines = text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")
    if len(lines) < 2 or not DAY_HEADER.fullmatch(lines[0]) or lines[1]:
        return entries, [f"header is {lines[:2]!r}"]
    current = lines[0].endswith(")")
    i = 2

    def value(first: str) -> str:
        """The value whose first written line is `first`, with its continuation lines from line i on."""
        nonlocal i
        more = []
        while current and i < len(lines) and lines[i].startswith("    "):
            more.append(lines[i][4:])
            i += 1
        if first.startswith(ESCAPED_MARK) or not current:
            if more:
                problems.append(f"line {i}: an escaped value has continuation lines")
            return unescape(first[len(ESCAPED_MARK) :] if current else first)
        return "\n".join([first, *more])

    while i < len(lines):
        head = _ENTRY_HEAD.fullmatch(lines[i])
        if head is None:
            problems.append(f"line {i + 1}: expected an entry heading, got {lines[i][:120]!r}")
            break
        i += 1
        action = value(head.group(2))
        details: list[tuple[str, str]] = []
        result: str | None = None
        if i < len(lines) and re.fullmatch("`{3,}", lines[i]):
            fence = lines[i]
            i += 1
            while i < len(lines) and lines[i] != fence:
                detail = _DETAIL.fullmatch(lines[i])
                if detail is None:
                    problems.append(f"line {i + 1}: not a `key: value` detail: {lines[i][:120]!r}")
                    return entries, problems
                key = detail.group(1)
                key = key[1:] if key[:2] in ("\\#", "\\`", "\\R", "\\ ", "\\\t") else key
                i += 1
                details.append((unescape(key), value(detail.group(2))))
            if i == len(lines):
                problems.append("unclosed details fence")
                break
            i += 1
        if i < len(lines) and lines[i].startswith("Result: "):
            i += 1
            result = value(lines[i - 1][len("Result: ") :])
        while i < len(lines) and lines[i] and not _ENTRY_HEAD.fullmatch(lines[i]):
            i += 1  # lines another tool wrote into the entry: memd keeps them verbatim after its own
        if i >= len(lines) or lines[i]:
            problems.append(f"line {i + 1}: an entry must end with a blank line")
            break
        i += 1
        entries.append((head.group(1), action, details, result))
    return entries, problems


def read_learnings(text: str) -> list[tuple[str, str, str]]:
    """(category, day, text) of every learning line of a MEMORY.md, in file order, values unescaped."""
    out: list[tuple[str, str, str]] = []
    category = ""
    for line in text.split("\n"):
        if line.startswith("## "):
            category = unescape(line[3:])
        elif m := _LEARNING.fullmatch(line):
            out.append((category, m.group(1), unescape(m.group(2))))
    return out


def hot_layout_problems(data: bytes) -> list[str]:
    """hot/context.json as memd lays it out (docs/format.md: 2-space indentation, one line per field and per list
    element, a final newline), checked line by line with the standard library's JSON decoder."""
    text = data.decode("utf-8")
    lines = text.split("\n")
    if not text.endswith("}\n") or lines[0] != "{":
        return [f"not an object on its own lines with a final newline: {text[:40]!r} ... {text[-40:]!r}"]
    problems = []
    in_list = False
    for number, line in enumerate(lines[1:-2], start=2):
        body = line.removesuffix(",")
        if in_list:
            if body == "  ]":
                in_list = False
                continue
            if not line.startswith("    ") or line.startswith("     "):
                problems.append(f"line {number}: a list element not indented 4 spaces: {line[:80]!r}")
            _json_or(problems, number, body.strip())
            continue
        m = re.fullmatch(r'  ("(?:[^"\\]|\\.)*"): (.*)', body)
        if m is None:
            problems.append(f'line {number}: not a `  "key": value` line: {line[:80]!r}')
            continue
        _json_or(problems, number, m.group(1))
        if m.group(2) == "[":
            in_list = True
        else:
            _json_or(problems, number, m.group(2))
    if in_list:
        problems.append("an unclosed list")
    return problems


def _json_or(problems: list[str], number: int, fragment: str) -> None:
    try:
        json.loads(fragment)
    except ValueError:
        problems.append(f"line {number}: not one JSON value: {fragment[:80]!r}")
