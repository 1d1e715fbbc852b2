"""The warm tier's file format: parse and render `warm/YYYY-MM-DD.md` day logs. Pure: no I/O.

A day file is a heading and a list of entries (specified in docs/format.md):

    # Activity Log YYYY-MM-DD (UTC+HH:MM, Zone)
    <blank line>
    ### HH:MM:SS - <action>
    ```
    <key>: <value>
        <the value's next line>
    ```
    Result: <result>
        <the result's next line>
    <blank line>

Text is written as it is: a backslash is a backslash, and a value's second and later lines follow it indented by
four spaces, so they read as lines. No value can forge structure: every line memd writes starts with fixed text
(`### HH:MM:SS - `, `Result: `, a fence), an escaped key, or four spaces; the details fence is longer than any
run of backticks inside it (CommonMark), so nothing in it can close it; and four spaces of indent are never a
heading, an entry, a fence or a `Result:` line, to memd or to a markdown reader. A value that holds a line
break other than LF (CR, VT, FF, FS, GS, RS, NEL, LS, PS), or that starts with a backslash and a space, is written
as one line: a backslash and a space, then the value escaped by `memd.textfmt.escape_inline`.
Keys stay escaped (`escape_inline`, and `:` as `\\:`), and a key whose first character is `#`, `` ` ``, a space or
a tab, or the key that is exactly `Result`, gets a backslash in front, so a detail line never starts a heading or
an entry, is never a fence or a continuation, and never reads as a `Result:` line, even to a tool that ignores
fences.

Day files from before this format (memd's older rule: every value escaped, one line) have a heading without the
time zone; their entries are read by that rule until a heading with a zone, which memd writes before its first
entry in such a file, switches to this one (`parse_day(text, current=True)` reads such a file as written: another
tool's day files, in a workspace memd adopted with them).
The parser reverses exactly what memd writes, tolerates what other tools and people write (CRLF, a missing final
newline, no blank lines, fences with an info string, unclosed fences) and never raises.
Imports only memd.textfmt.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from memd.textfmt import OTHER_LINE_BREAKS, escape_inline, unescape_inline

DAY_FILE_RE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})\.md")
FENCE = "```"
INDENT = "    "  # a value's second and later lines: never structure to memd or to a markdown reader
ESCAPED_MARK = "\\ "  # a value written as one escaped line (it holds a CR or another line break, rare)

# [0-9], not \d: \d also matches other scripts' digits, which would parse but could not be rendered back.
_TIME_RE = re.compile(r"[0-9]{2}:[0-9]{2}:[0-9]{2}")
# The " -" tail tolerates an editor that stripped the trailing space of an entry with an empty action.
_ENTRY_RE = re.compile(r"### ([0-9]{2}:[0-9]{2}:[0-9]{2}) -(?: (.*))?")
_RESULT_RE = re.compile(r"Result:(?: (.*))?")
_OPEN_FENCE_RE = re.compile(r"(`{3,})[^`]*")
_KEY_LEAD_ESCAPES = ("#", "`", "R", " ", "\t")  # "R" only ever comes from the key "Result"
# A day heading that names its time zone: the file (from there on) is in this format.
_ZONED_HEADING_RE = re.compile(r"# Activity Log [0-9]{4}-[0-9]{2}-[0-9]{2} \(UTC[+-][0-9]{2}:[0-9]{2}[^)]*\)[ \t]*")
_ZONED_HEADING_SEARCH = re.compile(_ZONED_HEADING_RE.pattern + r"\r?$", re.MULTILINE)
_ONE_LINE_ONLY = re.compile("[" + re.escape("\r" + OTHER_LINE_BREAKS) + "]")
_BACKTICKS = re.compile("`+")


@functools.lru_cache(maxsize=4096)  # every read's refresh lists warm/ and parses each name: a few hundred names
def parse_day_filename(name: str) -> date | None:
    """The day a warm file name stands for: only `YYYY-MM-DD.md` naming a real calendar date."""
    match = DAY_FILE_RE.fullmatch(name)
    if match is None:
        return None
    try:
        return date(int(match[1]), int(match[2]), int(match[3]))
    except ValueError:
        return None


def day_filename(day: date) -> str:
    return f"{day.isoformat()}.md"


def zone_label(local: datetime, zone: str) -> str:
    """`UTC+01:00, Europe/Paris`: the offset of `local` and the zone's name, for a day file's heading."""
    offset = local.utcoffset() or timedelta(0)
    sign = "-" if offset < timedelta(0) else "+"
    minutes = abs(int(offset.total_seconds())) // 60
    return f"UTC{sign}{minutes // 60:02d}:{minutes % 60:02d}, {zone}"


def day_header(day: date, zone: str) -> str:
    """What memd writes first into a day file it creates (and before its first entry in a day file from before
    this format): the day, the time zone its entries' times are in (`zone_label`), and a blank line."""
    heading = f"# Activity Log {day.isoformat()} ({zone})"
    if not _ZONED_HEADING_RE.fullmatch(heading):
        raise ValueError(f"not a zone label: {zone!r}")
    return heading + "\n\n"


def is_current_format(text: str) -> bool:
    """Does memd's text-as-written format apply at the end of this day file (a heading with a zone in it)?"""
    return _ZONED_HEADING_SEARCH.search(text) is not None


def is_entry_line(line: str) -> bool:
    """Does this line (no line break) start an entry, as the parse reads it?"""
    return _ENTRY_RE.fullmatch(line) is not None


def is_zoned_heading(line: str) -> bool:
    """Is this line (no line break) a day heading with a zone, from which the text-as-written format applies?"""
    return _ZONED_HEADING_RE.fullmatch(line) is not None


@dataclass(frozen=True, slots=True)
class WarmEntry:
    """One logged action. `extra` holds lines of a foreign entry that are not part of the format, verbatim."""

    time: str  # "HH:MM:SS"
    action: str
    details: tuple[tuple[str, str], ...] = ()
    result: str | None = None
    extra: str = ""
    # What memd.tiers.flush_identities made of this entry, kept with it: a checkpoint's flush looks up every parsed
    # entry of the recent days each time, and each is digested once. Not part of the entry's value (never
    # compared, hashed or shown); None until asked.
    flush_memo: bytes | None = field(default=None, compare=False, repr=False)


def _escape_key(key: str) -> str:
    escaped = escape_inline(key).replace(":", "\\:")
    if escaped.startswith(("#", "`", " ", "\t")) or escaped == "Result":
        escaped = "\\" + escaped
    return escaped


def _unescape_key(raw: str) -> str:
    if raw[:1] == "\\" and raw[1:2] in _KEY_LEAD_ESCAPES:
        raw = raw[1:]
    return unescape_inline(raw, literal=":")


def _value_lines(value: str) -> list[str]:
    """A value as the lines it is written on: its own lines, or one escaped line behind `\\ ` (a backslash and a
    space, which escaping never produces) when it holds a line break other than LF (a reader may split there) or
    itself starts with that mark."""
    if value.startswith(ESCAPED_MARK) or _ONE_LINE_ONLY.search(value):
        return [ESCAPED_MARK + escape_inline(value)]
    return value.split("\n")


def _written(first: str, lines: list[str]) -> list[str]:
    """`first` + the value's first line, then its other lines behind the indent; each newline-terminated."""
    return [f"{first}{lines[0]}\n", *(f"{INDENT}{line}\n" for line in lines[1:])]


def render_entry(entry: WarmEntry) -> str:
    """One entry as a newline-terminated piece ending in a blank line. A malformed time raises ValueError."""
    if not _TIME_RE.fullmatch(entry.time):
        raise ValueError(f"warm entry time must be HH:MM:SS, got {entry.time!r}")
    parts = _written(f"### {entry.time} - ", _value_lines(entry.action))
    if entry.details:
        block = [
            line for key, value in entry.details for line in _written(f"{_escape_key(key)}: ", _value_lines(value))
        ]
        longest = max((len(run) for line in block for run in _BACKTICKS.findall(line)), default=0)
        fence = "`" * max(len(FENCE), longest + 1) + "\n"  # longer than any backtick run inside: none closes it
        parts += [fence, *block, fence]
    if entry.result is not None:
        parts += _written("Result: ", _value_lines(entry.result))
    if entry.extra:
        parts += [_checked_extra_line(line) + "\n" for line in entry.extra.split("\n") if line.strip()]
    parts.append("\n")
    return "".join(parts)


def _checked_extra_line(line: str) -> str:
    # `extra` only ever comes from parse_day, which cannot put an entry line there; anything else is a bug
    # that must not become a forged entry.
    if _ENTRY_RE.fullmatch(line.removesuffix("\r")) or _ZONED_HEADING_RE.fullmatch(line.removesuffix("\r")):
        raise ValueError(f"warm entry extra line would start a new entry: {line!r}")
    return line


def _split_detail(line: str) -> tuple[str, str] | None:
    """Split `key: value` at the first unescaped ": " (or a final ":" whose space an editor stripped). Returns the
    unescaped key and the value as written."""
    i, n = 0, len(line)
    while i < n:
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch == ":" and (i + 1 == n or line[i + 1] == " "):
            return _unescape_key(line[:i]), line[i + 2 :]
        i += 1
    return None


_OUTSIDE, _IN_DETAILS, _IN_OTHER_FENCE = 0, 1, 2


class _Draft:
    """An entry being parsed. The first fenced block holds the details; later blocks are foreign text. Values are
    kept as the lines they were written on and read back by the file's rule (`current`: text as written, with
    indented continuation lines; otherwise the older rule: every value one escaped line)."""

    def __init__(self, time: str, action: str, current: bool) -> None:
        self.time = time
        self.current = current
        self.action = [action]
        self.details: list[tuple[str, list[str]]] = []
        self.result: list[str] | None = None
        self.extra: list[str] = []
        self.state = _OUTSIDE
        self.fence = 0  # the length of the open fence's backtick run
        self.had_details_block = False
        self.continued: list[str] | None = self.action if current else None  # the value a next line may continue
        self.blanks = 0  # blank lines seen while a value may still continue

    def feed(self, line: str) -> None:
        if self.continued is not None:
            if line.startswith(INDENT):
                self.continued += [""] * self.blanks + [line[len(INDENT) :]]
                self.blanks = 0
                return
            if not line.strip():  # an indented empty line whose spaces an editor stripped, or the entry's end
                self.blanks += 1
                return
            self.continued, self.blanks = None, 0
        if self.state == _IN_DETAILS:
            if self._closes(line):
                self.state = _OUTSIDE
                return
            pair = _split_detail(line)
            if pair is not None:
                value = [pair[1]]
                self.details.append((pair[0], value))
                self.continued = value if self.current else None
            elif line.strip():
                self.extra.append(line)
            return
        if self.state == _IN_OTHER_FENCE:
            if line.strip():
                self.extra.append(line)
            if self._closes(line):
                self.state = _OUTSIDE
            return
        if not line.strip():
            return
        fence = _OPEN_FENCE_RE.fullmatch(line)
        if fence is not None:
            self.fence = len(fence[1])
            if self.had_details_block:
                self.state = _IN_OTHER_FENCE
                self.extra.append(line)
            else:
                self.state = _IN_DETAILS
                self.had_details_block = True
            return
        match = _RESULT_RE.fullmatch(line)
        if match is not None and self.result is None:
            self.result = [match[1] or ""]
            self.continued = self.result if self.current else None
            return
        self.extra.append(line)

    def _closes(self, line: str) -> bool:
        """A closing fence: only backticks (then blanks), at least as many as opened it (CommonMark)."""
        stripped = line.rstrip(" \t")
        return len(stripped) >= self.fence and stripped == "`" * len(stripped)

    def _value(self, lines: list[str]) -> str:
        if not self.current:
            return unescape_inline(lines[0])
        text = "\n".join(lines)
        return unescape_inline(text[len(ESCAPED_MARK) :]) if text.startswith(ESCAPED_MARK) else text

    def finish(self) -> WarmEntry:
        return WarmEntry(
            self.time,
            self._value(self.action),
            tuple((key, self._value(value)) for key, value in self.details),
            None if self.result is None else self._value(self.result),
            "\n".join(self.extra),
        )


def _lines(text: str) -> list[str]:
    # Split on "\n" only: memd writes every other line break escaped, so a \x0b, \x1c, \u2028, ... in a file was put
    # there by hand and is content of its line. A raw "\r" never appears in what memd writes, so a trailing one
    # is a CRLF line end.
    return [line.removesuffix("\r") for line in text.removeprefix("\ufeff").split("\n")]


def parse_day(text: str, current: bool = False) -> list[WarmEntry]:
    """The entries of a day file, in file order. Text before the first entry is ignored. Never raises.
    `current`: read by the text-as-written rule from the start (a piece of a file known to be in it); otherwise
    from the first heading with a time zone on."""
    return _parse(_lines(text), current)[0]


@dataclass(frozen=True, slots=True)
class Resume:
    """Where the parse of a growing day file goes on. Bytes before `offset` are final: an append cannot change
    the `entries` parsed from them. From `offset` on, the file is parsed again once it grows: it starts at the
    last entry whose heading line is complete (an append can still add lines to that entry), or, with none, at
    the last line (which an append can complete). `current`: the reading rule in effect at `offset`; `at_end`:
    the rule at the end of what was parsed, by which an entry appended there is read."""

    offset: int
    entries: int
    current: bool
    at_end: bool


def parse_day_bytes(data: bytes, resume: Resume | None = None, current: bool = False) -> tuple[list[WarmEntry], Resume]:
    """Incremental parse_day: the entries of a day file's bytes and where to go on once it grows.

    `data` is the whole file (`resume` None), or the file from `resume.offset` on; then the entries returned
    replace the ones from `resume.entries` on, and the result is exactly what parse_day of the whole file gives
    (`current` as in parse_day, for the whole file)
    (line breaks are bytes, so splitting the bytes at a line start splits the text at the same line; an entry line
    always starts an entry, inside a fence too). The returned Resume counts from the start of the file."""
    base = resume.offset if resume is not None else 0
    text = data.decode("utf-8", "replace")
    lines = _lines(text) if base == 0 else [line.removesuffix("\r") for line in text.split("\n")]
    entries, starts, currents, current_at_last, at_end = _parse(
        lines, resume.current if resume is not None else current
    )
    last = len(lines) - 1  # the text after the final line break: a partial line, or nothing
    line, kept, current = last, len(entries), current_at_last
    for k in range(len(starts) - 1, -1, -1):
        if starts[k] < last:  # the newest entry whose heading line ends in a line break
            line, kept, current = starts[k], k, currents[k]
            break
        line, kept, current = starts[k], k, currents[k]  # a partial heading: at least from its own line
    pos = len(data)
    for _ in range(len(lines) - line):  # the line's start, found from the end: it is near the end
        pos = data.rfind(b"\n", 0, pos)
    done = 0 if resume is None else resume.entries
    return entries, Resume(base + pos + 1, done + kept, current, at_end)


def _parse(lines: list[str], current: bool) -> tuple[list[WarmEntry], list[int], list[bool], bool, bool]:
    """The entries of `lines`, the line each starts on, the rule each is read by, the rule at the last line and
    the rule after it."""
    entries: list[WarmEntry] = []
    starts: list[int] = []
    currents: list[bool] = []
    draft: _Draft | None = None
    last = len(lines) - 1
    current_at_last = current
    for i, line in enumerate(lines):
        if i == last:
            current_at_last = current
        # Entry lines count even inside a fence, so an unclosed fence ends with its own entry.
        match = _ENTRY_RE.fullmatch(line)
        if match is not None:
            if draft is not None:
                entries.append(draft.finish())
            draft = _Draft(match[1], match[2] or "", current)
            starts.append(i)
            currents.append(current)
        elif _ZONED_HEADING_RE.fullmatch(line):
            if draft is not None:
                entries.append(draft.finish())
                draft = None
            current = True
        elif draft is not None:
            draft.feed(line)
    if draft is not None:
        entries.append(draft.finish())
    return entries, starts, currents, current_at_last, current
