"""The escaping rule that keeps field values from creating markdown structure.

Warm and cold files are line-oriented markdown. Any value memd writes into them goes through `escape_inline`,
which makes it a single line that cannot start a heading, an entry, a fence or a `Result:` line, and
`unescape_inline` reverses it exactly. The rule (documented in docs/format.md):

    "\\" -> "\\\\"   newline -> "\\n"   carriage return -> "\\r"

Because the escaped value has no line break, it can never begin a line: markdown structure lives at line
starts, so no heading, entry, section or fence can be injected. Imports nothing from memd.
"""

from __future__ import annotations

_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r"}
_UNESCAPES = {"\\": "\\", "n": "\n", "r": "\r"}


def escape_inline(text: str) -> str:
    """Return `text` as one line; `unescape_inline` gives it back exactly."""
    if "\\" not in text and "\n" not in text and "\r" not in text:
        return text
    return "".join(_ESCAPES.get(ch, ch) for ch in text)


def unescape_inline(text: str) -> str:
    """Reverse `escape_inline`. An unknown escape (from a hand-written file) is kept as written."""
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\\" and i + 1 < n and text[i + 1] in _UNESCAPES:
            out.append(_UNESCAPES[text[i + 1]])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)
