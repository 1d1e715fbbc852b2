"""The warm tier's file format: parse and render `warm/YYYY-MM-DD.md` day logs. Pure: no I/O.

A day file is a list of entries (specified in docs/format.md):

    ### HH:MM:SS - <action>
    ```
    <key>: <value>
    ```
    Result: <result>
    <blank line>

Every field goes through `memd.textfmt.escape_inline`, so no value can break a line (LF, CR or any other line
break). Keys get two more
escapes, because a detail line starts with its key and is split at its first ": ":
  * every ":" in a key is written "\\:";
  * a key whose first character is "#" or "`", or the key that is exactly "Result", gets a backslash in front
    ("\\#", "\\`", "\\Result"), so no detail line can start a heading or an entry, be a fence, or read as a
    `Result:` line, even to a tool that ignores fences.
The parser reverses exactly this, tolerates what other tools and people write (CRLF, a missing final newline,
no blank lines, fences with an info string, unclosed fences) and never raises.
Imports only memd.textfmt.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date

from memd.textfmt import escape_inline, unescape_inline

DAY_FILE_RE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})\.md")
FENCE = "```"

# [0-9], not \d: \d also matches other scripts' digits, which would parse but could not be rendered back.
_TIME_RE = re.compile(r"[0-9]{2}:[0-9]{2}:[0-9]{2}")
# The " -" tail tolerates an editor that stripped the trailing space of an entry with an empty action.
_ENTRY_RE = re.compile(r"### ([0-9]{2}:[0-9]{2}:[0-9]{2}) -(?: (.*))?")
_RESULT_RE = re.compile(r"Result:(?: (.*))?")
_OPEN_FENCE_RE = re.compile(r"`{3,}[^`]*")
_CLOSE_FENCE_RE = re.compile(r"`{3,}[ \t]*")
_KEY_LEAD_ESCAPES = ("#", "`", "R")  # "R" only ever comes from the key "Result"


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


def day_header(day: date) -> str:
    """What memd writes first into a day file it creates."""
    return f"# Activity Log {day.isoformat()}\n\n"


@dataclass(frozen=True, slots=True)
class WarmEntry:
    """One logged action. `extra` holds lines of a foreign entry that are not part of the format, verbatim."""

    time: str  # "HH:MM:SS"
    action: str
    details: tuple[tuple[str, str], ...] = ()
    result: str | None = None
    extra: str = ""


def _escape_key(key: str) -> str:
    escaped = escape_inline(key).replace(":", "\\:")
    if escaped.startswith(("#", "`")) or escaped == "Result":
        escaped = "\\" + escaped
    return escaped


def _unescape_key(raw: str) -> str:
    if raw[:1] == "\\" and raw[1:2] in _KEY_LEAD_ESCAPES:
        raw = raw[1:]
    return unescape_inline(raw, literal=":")


def render_entry(entry: WarmEntry) -> str:
    """One entry as a newline-terminated piece ending in a blank line. A malformed time raises ValueError."""
    if not _TIME_RE.fullmatch(entry.time):
        raise ValueError(f"warm entry time must be HH:MM:SS, got {entry.time!r}")
    parts = [f"### {entry.time} - {escape_inline(entry.action)}\n"]
    if entry.details:
        parts.append(FENCE + "\n")
        parts += [f"{_escape_key(key)}: {escape_inline(value)}\n" for key, value in entry.details]
        parts.append(FENCE + "\n")
    if entry.result is not None:
        parts.append(f"Result: {escape_inline(entry.result)}\n")
    if entry.extra:
        parts += [_checked_extra_line(line) + "\n" for line in entry.extra.split("\n") if line.strip()]
    parts.append("\n")
    return "".join(parts)


def _checked_extra_line(line: str) -> str:
    # `extra` only ever comes from parse_day, which cannot put an entry line there; anything else is a bug
    # that must not become a forged entry.
    if _ENTRY_RE.fullmatch(line.removesuffix("\r")):
        raise ValueError(f"warm entry extra line would start a new entry: {line!r}")
    return line


def _split_detail(line: str) -> tuple[str, str] | None:
    """Split `key: value` at the first unescaped ": " (or a final ":" whose space an editor stripped)."""
    i, n = 0, len(line)
    while i < n:
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch == ":" and (i + 1 == n or line[i + 1] == " "):
            return _unescape_key(line[:i]), unescape_inline(line[i + 2 :])
        i += 1
    return None


_OUTSIDE, _IN_DETAILS, _IN_OTHER_FENCE = 0, 1, 2


class _Draft:
    """An entry being parsed. The first fenced block holds the details; later blocks are foreign text."""

    def __init__(self, time: str, action: str) -> None:
        self.time = time
        self.action = action
        self.details: list[tuple[str, str]] = []
        self.result: str | None = None
        self.extra: list[str] = []
        self.state = _OUTSIDE
        self.had_details_block = False

    def feed(self, line: str) -> None:
        if self.state == _IN_DETAILS:
            if _CLOSE_FENCE_RE.fullmatch(line):
                self.state = _OUTSIDE
                return
            pair = _split_detail(line)
            if pair is not None:
                self.details.append(pair)
            elif line.strip():
                self.extra.append(line)
            return
        if self.state == _IN_OTHER_FENCE:
            if line.strip():
                self.extra.append(line)
            if _CLOSE_FENCE_RE.fullmatch(line):
                self.state = _OUTSIDE
            return
        if not line.strip():
            return
        if _OPEN_FENCE_RE.fullmatch(line):
            if self.had_details_block:
                self.state = _IN_OTHER_FENCE
                self.extra.append(line)
            else:
                self.state = _IN_DETAILS
                self.had_details_block = True
            return
        match = _RESULT_RE.fullmatch(line)
        if match is not None and self.result is None:
            self.result = unescape_inline(match[1] or "")
            return
        self.extra.append(line)

    def finish(self) -> WarmEntry:
        return WarmEntry(self.time, self.action, tuple(self.details), self.result, "\n".join(self.extra))


def _lines(text: str) -> list[str]:
    # Split on "\n" only: memd escapes every other line break, so a \x0b, \x1c, \u2028, ... in a file was put
    # there by hand and is content of its line. A raw "\r" never appears in what memd writes, so a trailing one
    # is a CRLF line end.
    return [line.removesuffix("\r") for line in text.removeprefix("\ufeff").split("\n")]


def parse_day(text: str) -> list[WarmEntry]:
    """The entries of a day file, in file order. Text before the first entry is ignored. Never raises."""
    entries: list[WarmEntry] = []
    draft: _Draft | None = None
    for line in _lines(text):
        # Entry lines count even inside a fence, so an unclosed fence ends with its own entry.
        match = _ENTRY_RE.fullmatch(line)
        if match is not None:
            if draft is not None:
                entries.append(draft.finish())
            draft = _Draft(match[1], unescape_inline(match[2] or ""))
        elif draft is not None:
            draft.feed(line)
    if draft is not None:
        entries.append(draft.finish())
    return entries
