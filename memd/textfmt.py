"""The escaping rule that keeps stored values from creating markdown structure.

Every value memd writes into a markdown file (warm day logs, MEMORY.md) or renders into markdown (the context
payload, `hot.get`'s rendering) goes through `escape_inline`, which makes it a single line; `unescape_inline`
reverses it exactly. The rule (documented in docs/format.md):

    "\\" -> "\\\\"   LF -> "\\n"   CR -> "\\r"
    every other line break Unicode or a reader may split on (VT, FF, FS, GS, RS, NEL, LS, PS) -> "\\uXXXX"

Markdown ends a line at LF, CR and CRLF; `str.splitlines()` and many editors also end one at VT, FF, the
separators U+001C-U+001E, NEL, and U+2028/U+2029. None of them survives escaping, so an escaped value cannot
begin a line whatever reads it: markdown structure lives at line starts, so no heading, entry, section or fence
can be injected. The hot summary is the one stored value that is markdown by design: it is rendered line by line
(split at the same line breaks) through `neutralise_line`, the same rule plus a backslash in front of a line that
markdown would read as structure. Imports nothing from memd.
"""

from __future__ import annotations

import re

# Every character str.splitlines() splits on besides LF and CR; written as \uXXXX (lowercase hex).
OTHER_LINE_BREAKS = "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
LINE_BREAKS = "\n\r" + OTHER_LINE_BREAKS

_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r"} | {ch: f"\\u{ord(ch):04x}" for ch in OTHER_LINE_BREAKS}
_NEEDS_ESCAPE = re.compile("[" + re.escape("\\" + LINE_BREAKS) + "]")
_SIMPLE_UNESCAPES = {"\\": "\\", "n": "\n", "r": "\r"}
_CODE_UNESCAPES = {f"{ord(ch):04x}": ch for ch in OTHER_LINE_BREAKS}
_HEX = frozenset("0123456789abcdefABCDEF")


def escape_inline(text: str) -> str:
    """Return `text` as one line; `unescape_inline` gives it back exactly."""
    if text.isascii():  # the common case, checked at C speed (the regex costs three times as much)
        if (
            "\\" not in text
            and "\n" not in text
            and "\r" not in text
            and "\x0b" not in text
            and "\x0c" not in text
            and "\x1c" not in text
            and "\x1d" not in text
            and "\x1e" not in text
        ):
            return text
    elif _NEEDS_ESCAPE.search(text) is None:
        return text
    return _NEEDS_ESCAPE.sub(_escape_match, text)


def _escape_match(match: re.Match[str]) -> str:
    return _ESCAPES[match[0]]


def unescape_inline(text: str, literal: str = "") -> str:
    """Reverse `escape_inline`. An unknown escape (from a hand-written file: `\\q`, `\\u0041`) is kept as written.

    `literal`: characters that are also escaped as themselves (`\\:` in a warm key)."""
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\\" and i + 1 < n:
            nxt = text[i + 1]
            if nxt in _SIMPLE_UNESCAPES or nxt in literal:
                out.append(_SIMPLE_UNESCAPES.get(nxt, nxt))
                i += 2
                continue
            code = text[i + 2 : i + 6]
            if nxt == "u" and len(code) == 4 and _HEX.issuperset(code) and code.lower() in _CODE_UNESCAPES:
                out.append(_CODE_UNESCAPES[code.lower()])
                i += 6
                continue
        out.append(ch)
        i += 1
    return "".join(out)


# A line markdown could read as structure: an ATX heading, a fence, a block quote, an HTML block (a comment
# could hide what follows), a setext underline or a thematic break.
_STRUCTURE_RE = re.compile(r"[ \t]*(?:[#><]|`{3}|~{3}|=+[ \t]*$|-+[ \t]*$|([-*_])[ \t]*(?:\1[ \t]*){2,}$)")


def neutralise_line(line: str) -> str:
    """One line of a multi-line markdown value (no line break in it), made unable to add structure: escaped with
    `escape_inline` (so only backslashes change), and given a backslash in front when markdown would read it as
    structure (a heading, a fence, a block quote, an HTML block, a setext underline or a thematic break):
    `## Pending actions` is rendered `\\## Pending actions`, literal text. Bullets and prose are kept."""
    escaped = escape_inline(line)
    return "\\" + escaped if _STRUCTURE_RE.match(escaped) else escaped
