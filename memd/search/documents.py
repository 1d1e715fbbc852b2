"""What the search index holds, made from the tier files' bytes: one document per hot note, decision and summary,
per warm entry and per cold learning, each with where it is (file, 1-based line range) and its date. Pure: no I/O.

Warm entries are found by the same heading rule and parsed by the same parser as memd.tiers.warm_format (each
entry's lines alone), so an entry's line range is exact; text before the first heading is not an entry. A day
file can be indexed from an offset (`warm_day(..., start_line=)`): its tail after an append. Hot line numbers
are those of the JSON line holding the note's id (or text) in `hot/context.json`. Imports the tier formats.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from memd.tiers import cold_format, hot_format, proposals_format, warm_format

# warm_format's entry heading rule (`### HH:MM:SS - action`, or `-` alone; a CRLF line end allowed), on bytes
_HEAD = rb"### [0-9]{2}:[0-9]{2}:[0-9]{2} -(?:\r| [^\n]*)?(?=\n|\Z)"
_ENTRY_HEAD = re.compile(_HEAD)
_ENTRY_LINES = re.compile(rb"(?m)^" + _HEAD)
_DAY_HEADING = rb"# Activity Log [^\n]*"
_DAY_HEADINGS = re.compile(rb"(?m)^" + _DAY_HEADING)  # those with a time zone switch the format
_DAY_HEAD = re.compile(_DAY_HEADING)
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True, slots=True)
class Doc:
    tier: str  # "hot", "warm", "cold"
    kind: str  # "note", "decision", "summary", "entry", "learning", "proposal" (cold/PROPOSED.md)
    date: str | None  # YYYY-MM-DD, None when the item carries none (a summary before any checkpoint)
    time: str | None  # HH:MM:SS for warm entries
    line_start: int  # 1-based, in the file (for an archived day: in the day's own text)
    line_end: int
    heading: str  # a warm entry's action, a learning's category, a decision's action
    body: str
    ref: str | None = None  # a hot note's or decision's id


@dataclass(frozen=True, slots=True)
class DayTail:
    """Where the last entry of a day file starts (bytes and line), and whether the file's text-as-written format
    (a day heading with a time zone, memd.tiers.warm_format) applies there: an append is indexed from there."""

    offset: int
    line: int
    current: bool = False


def _text(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else json.dumps(value, ensure_ascii=False)


# --- hot ---------------------------------------------------------------------------------------------------------


def hot(doc: hot_format.HotDoc, raw: str) -> list[Doc]:
    """Notes, decisions and the summary of a parsed hot document; `raw` is the file's text (for line numbers)."""
    docs: list[Doc] = []
    locate = _Locator(raw)
    for kind in ("decisions", "notes"):
        for item in doc.get(kind) or []:
            if not isinstance(item, dict):
                continue
            ref = item.get("id") if isinstance(item.get("id"), str) else None
            ts = _text(item.get("ts"))
            day = ts[:10] if re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", ts[:10]) else None
            if kind == "notes":
                text = _text(item.get("text"))
                line = locate.find(ref if ref else text)
                docs.append(Doc("hot", "note", day, None, line, line, "", text, ref))
            else:
                action = _text(item.get("action"))
                body = _text(item.get("reason"))
                if item.get("risk"):
                    body += f"\nrisk: {_text(item.get('risk'))}"
                line = locate.find(ref if ref else action)
                docs.append(Doc("hot", "decision", day, None, line, line, action, body, ref))
    summary = _text(doc.get("summary"))
    if summary.strip():
        records = [r for r in doc.get("checkpoints") or [] if isinstance(r, dict) and isinstance(r.get("at"), str)]
        day = records[-1]["at"][:10] if records else None
        line = _Locator(raw).key("summary")
        docs.append(Doc("hot", "summary", day, None, line, line, "", summary))
    return docs


class _Locator:
    """Line numbers of JSON string values in the raw text, found in order (so equal texts get their own line)."""

    def __init__(self, raw: str) -> None:
        self.raw = raw
        self.pos = 0

    def find(self, value: str) -> int:
        for encoded in (json.dumps(value, ensure_ascii=False), json.dumps(value)):
            at = self.raw.find(encoded, self.pos)
            if at >= 0:
                self.pos = at + len(encoded)
                return self.raw.count("\n", 0, at) + 1
        return 1

    def key(self, name: str) -> int:
        at = self.raw.rfind(json.dumps(name) + ":")
        return self.raw.count("\n", 0, at) + 1 if at >= 0 else 1


# --- warm --------------------------------------------------------------------------------------------------------


def warm_day(data: bytes, day: str, start: DayTail | None = None) -> tuple[list[Doc], DayTail]:
    """The entries of a day file's bytes (`data` starts at `start`: the tail of a file indexed before), and where
    the last entry starts (or the last complete line, when there is none), for indexing an append from there.

    Entry headings (and day headings with a time zone, which end the entry before them and switch the format, as
    in warm_format.parse_day) are found by one regex pass over the bytes; each entry's bytes are then parsed by
    warm_format.parse_day alone."""
    start = start or DayTail(0, 1)
    marks = [(m.start(), True) for m in _ENTRY_LINES.finditer(data)]
    if start.offset == 0 and data.startswith(_BOM) and _ENTRY_HEAD.match(data, len(_BOM)):
        marks.insert(0, (0, True))  # parse_day drops a byte-order mark before the first line
    headings = list(_DAY_HEADINGS.finditer(data))
    if start.offset == 0 and data.startswith(_BOM):  # parse_day drops it before a day heading too
        first = _DAY_HEAD.match(data, len(_BOM))
        headings += [first] if first is not None else []
    marks += [
        (0 if m.start() == len(_BOM) and start.offset == 0 and data.startswith(_BOM) else m.start(), False)
        for m in headings
        if warm_format.is_current_format(m.group().decode("utf-8", "replace"))
    ]
    marks.sort()
    docs: list[Doc] = []
    current = start.current
    line, counted = start.line, 0
    tail: DayTail | None = None
    for index, (pos, is_entry) in enumerate(marks):
        line += data.count(b"\n", counted, pos)
        counted = pos
        if not is_entry:
            current = True
            continue
        end = marks[index + 1][0] if index + 1 < len(marks) else len(data)
        chunk = data[pos:end]
        tail = DayTail(start.offset + pos, line, current)
        parsed = warm_format.parse_day(chunk.decode("utf-8", "replace"), current)
        if not parsed:
            continue
        entry = parsed[0]
        body = [f"{k}: {v}" for k, v in entry.details]
        if entry.result:
            body.append(entry.result)
        if entry.extra:
            body.append(entry.extra)
        last = line + chunk.rstrip().count(b"\n")
        docs.append(Doc("warm", "entry", day, entry.time, line, last, entry.action, "\n".join(body)))
    if tail is None:  # no entry here: go on from the last complete line (it may be a heading half written)
        complete = data.rfind(b"\n") + 1
        tail = DayTail(start.offset + complete, start.line + data.count(b"\n", 0, complete), current)
    return docs, tail


# --- cold --------------------------------------------------------------------------------------------------------


def cold(text: str) -> Iterator[Doc]:
    """One document per learning, made as the index takes them in (a whole MEMORY.md's at once was tens of
    megabytes of small objects on the search thread after every fold: cold_format.iter_located_learnings)."""
    for line, lr in cold_format.iter_located_learnings(text):
        yield Doc("cold", "learning", lr.date, None, line + 1, line + 1, lr.category, lr.text)


def proposals(text: str) -> list[Doc]:
    """cold/PROPOSED.md: one document per proposal (tier "cold", kind "proposal", its id as `ref`), its lines the
    learning line and the `  - key: value` lines below it."""
    return [
        Doc("cold", "proposal", p.date, p.time or None, p.line + 1, p.end, p.category, p.text, p.id)
        for p in proposals_format.parse(text)
    ]
