"""Reading a workspace back with memd's own parsers, and checking it against what clients were told.

`inspect()` reads hot/context.json (hot_format.parse), every warm day file (warm_format.parse_day) and
cold/MEMORY.md (cold_format.parse_memory), and lists memd's temp files. Beyond "it parses" it checks that the files
are exactly what memd writes, so a torn or interleaved write cannot hide behind a tolerant parser:
  * a day file must equal its header followed by the re-rendering of its parsed entries, byte for byte;
  * MEMORY.md must consist of the preamble, blank lines, unique `## ` headings and `- [date] text` lines, except
    for a run of one-learning blocks at its end, as a burst of learnings appends them before they are folded back
    (or as a restore of a snapshot taken mid-burst brings them back: docs/format.md).
Each format is also read by a parser that shares no code with memd (tests/expected.py, written from
docs/format.md), which must find the grammar memd writes and agree with memd's parser on every value: a bug in
memd's renderer that its parser repeats (so the re-rendering above still matches) shows here.

`Ledger` collects the writer processes' .sent/.ack files; `account()` counts every label in the files: an
acknowledged label must be present exactly once in its tier (a decision both in hot and as a warm entry), one
that was sent but not acknowledged at most once, and no label may appear that was never sent.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import expected  # tests/expected.py: torture/run.py puts tests/ on the path

from memd import fsio
from memd.errors import CorruptFile
from memd.tiers import cold_format, flush_identities, hot_format, warm_format
from memd.tiers.cold_format import Learning
from memd.tiers.warm_format import WarmEntry

LABEL_RE = re.compile(r"([whcd])-([0-9A-Za-z_]+)-([0-9]+)")
_LEARNING_LINE = re.compile(r"- \[[0-9]{4}-[0-9]{2}-[0-9]{2}\] .*")


@dataclass
class WsState:
    root: Path
    hot: dict[str, Any] | None = None
    warm: dict[str, list[WarmEntry]] = field(default_factory=dict)
    learnings: list[Learning] = field(default_factory=list)
    cold_text: str = ""
    temps: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def entries(self) -> list[WarmEntry]:
        return [e for name in sorted(self.warm) for e in self.warm[name]]

    @property
    def notes(self) -> list[dict[str, Any]]:
        return list((self.hot or {}).get("notes") or [])

    @property
    def decisions(self) -> list[dict[str, Any]]:
        return list((self.hot or {}).get("decisions") or [])

    @property
    def checkpoints(self) -> list[dict[str, Any]]:
        return list((self.hot or {}).get("checkpoints") or [])


def warm_problems(name: str, data: bytes) -> tuple[list[WarmEntry], list[str]]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return [], [f"warm/{name}: not UTF-8 ({exc})"]
    entries = warm_format.parse_day(text)
    if not text:  # created, nothing appended yet: memd writes the header with the first append
        return entries, []
    day = warm_format.parse_day_filename(name)
    assert day is not None
    header = text.split("\n", 1)[0]  # the day and the zone its times are in, checked by the grammar below
    rendered = header + "\n\n" + "".join(warm_format.render_entry(e) for e in entries)
    if not expected.DAY_HEADER.fullmatch(header) or not header.startswith(f"# Activity Log {day.isoformat()}"):
        return entries, [f"warm/{name}: first line is {header[:80]!r}, not this day's header"]
    if text != rendered:
        pairs = enumerate(zip(text, rendered, strict=False))
        at = next((i for i, (a, b) in pairs if a != b), min(len(text), len(rendered)))
        return entries, [
            f"warm/{name}: not exactly what memd writes at offset {at} of {len(text)}: "
            f"file has {text[max(0, at - 40) : at + 80]!r}, re-rendering gives {rendered[max(0, at - 40) : at + 80]!r}"
        ]
    independent, problems = expected.read_warm_day(text)
    ours = [(e.time, e.action, list(e.details), e.result) for e in entries]
    if not problems and independent != ours:
        differ = next(i for i, (a, b) in enumerate(zip(independent, ours, strict=False)) if a != b) if ours else 0
        problems = [
            f"entry {differ}: docs/format.md reads {independent[differ : differ + 1]}, memd {ours[differ : differ + 1]}"
        ]
    return entries, [f"warm/{name}: {p}" for p in problems]


def trailing_blocks(text: str) -> int:
    """The length of the run of one-learning blocks at the end of `text` that a burst of learnings appended
    (`\n## heading\n- [date] text\n` each), from the first whose heading an earlier section has: memd's run before
    its fold, or one a restore of a snapshot taken mid-burst brought back (docs/format.md). 0: none."""
    starts: list[int] = []
    end = len(text)
    while True:
        start = text.rfind("\n## ", 0, end)
        if start < 1 or text[start - 1] != "\n" or cold_format.parse_appended(text[start:end]) is None:
            break
        starts.append(start)
        end = start
    seen = {line for line in text[:end].split("\n") if line.startswith("## ")}
    for start in reversed(starts):
        heading = text[start + 1 : text.index("\n", start + 1)]
        if heading in seen:
            return len(text) - start
        seen.add(heading)
    return 0


def cold_problems(text: str, run: int = 0) -> list[str]:
    """`run`: the length of the run of blocks at the end (`trailing_blocks`), whose headings may repeat."""
    problems: list[str] = []
    headings: Counter[str] = Counter()
    lines = text[: len(text) - run].split("\n")
    if text and not text.endswith("\n"):
        problems.append("cold/MEMORY.md: no final newline")
    if text and lines[0] != "# Agent Memory":
        problems.append(f"cold/MEMORY.md: first line is {lines[0][:80]!r}")
    for number, line in enumerate(lines[1:], start=2):
        if not line:
            continue
        if line.startswith("## "):
            headings[line] += 1
        elif not _LEARNING_LINE.fullmatch(line):
            problems.append(f"cold/MEMORY.md:{number}: unexpected line {line[:120]!r}")
    problems += [f"cold/MEMORY.md: heading {h!r} appears {n} times" for h, n in headings.items() if n > 1]
    independent = expected.read_learnings(text)
    ours = [(lr.category, lr.date, lr.text) for lr in cold_format.parse_memory(text)]
    if independent != ours:
        problems.append(
            f"cold/MEMORY.md: docs/format.md reads {len(independent)} learnings, memd {len(ours)}, "
            f"first difference {next((p for p in zip(independent, ours, strict=False) if p[0] != p[1]), None)}"
        )
    return problems[:20]


def inspect(root: Path, strict: bool = True) -> WsState:
    """Read a workspace's files as memd would; `strict` adds the byte-exactness checks described above."""
    state = WsState(root)
    for tier in ("hot", "warm", "cold"):
        state.temps += [f"{tier}/{n}" for n in _names(root / tier) if fsio.is_temp_name(n)]
    context, own = (_hot_file(state, root / "hot" / name, strict) for name in ("context.json", hot_format.OWN_FILE))
    if context is not None or own is not None:
        state.hot = hot_format.merge(context, own)[0]  # memd's own keys (notes, summary...) live in memd.json
    for name in _names(root / "warm"):
        if warm_format.parse_day_filename(name) is None or not (root / "warm" / name).is_file():
            continue
        data = (root / "warm" / name).read_bytes()
        if strict:
            entries, problems = warm_problems(name, data)
            state.problems += problems
        else:
            entries = warm_format.parse_day(data.decode("utf-8", "replace"))
        state.warm[name] = entries
    cold_path = root / "cold" / "MEMORY.md"
    if os.path.lexists(cold_path):
        try:
            state.cold_text = cold_path.read_bytes().decode("utf-8")
            state.learnings = cold_format.parse_memory(state.cold_text)
            if strict:
                state.problems += cold_problems(state.cold_text, trailing_blocks(state.cold_text))
        except UnicodeDecodeError as exc:
            state.problems.append(f"cold: not UTF-8 ({exc})")
    return state


def _hot_file(state: WsState, path: Path, strict: bool) -> dict[str, Any] | None:
    """One of the hot files parsed (None when it does not exist or is corrupt, which is then a problem)."""
    if not os.path.lexists(path):
        return None
    name = f"hot/{path.name}"
    try:
        data = path.read_bytes()
        doc = hot_format.parse(data, name)
    except CorruptFile as exc:
        state.problems.append(f"hot: {exc.message}")
        return None
    except OSError as exc:
        state.problems.append(f"hot: cannot read: {exc}")
        return None
    if strict:  # the layout memd writes, and the standard library's reading of it equal to memd's
        state.problems += [f"{name}: {p}" for p in expected.hot_layout_problems(data)]
        if json.loads(data) != doc:
            state.problems.append(f"{name}: memd's parser and json.loads disagree")
    return doc


def _names(directory: Path) -> list[str]:
    try:
        return sorted(os.listdir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return []


# --- what clients were told -------------------------------------------------------------------------------------


@dataclass
class Ledger:
    acked: dict[str, str] = field(default_factory=dict)  # label -> note/decision id ("-" when none)
    sent: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)

    def load(self, directory: Path) -> Ledger:
        for path in sorted(directory.glob("*.sent")):
            self.sent.update(line for line in path.read_text().splitlines() if line)
        for path in sorted(directory.glob("*.ack")):
            for line in path.read_text().splitlines():
                label, _, ident = line.partition("\t")
                if label:
                    self.acked[label] = ident
        for path in sorted(directory.glob("*.err")):
            self.errors += [line for line in path.read_text().splitlines() if line]
        return self

    def by_kind(self) -> Counter[str]:
        return Counter(label[0] for label in self.acked)


@dataclass
class Accounting:
    checked: int = 0
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    phantom: list[str] = field(default_factory=list)
    compressed: int = 0

    def summary(self) -> str:
        return (
            f"{self.checked} acked checked, {len(self.lost)} lost, {len(self.duplicated)} duplicated, "
            f"{len(self.phantom)} never sent"
        )


def account(
    state: WsState,
    ledger: Ledger,
    compressed_ok: bool = False,
    records: list[dict[str, Any]] | None = None,
    flushed_ok: bool = False,
) -> Accounting:
    """Count every label in the files against the ledger (see the module docstring). With `compressed_ok`, a hot
    note or decision may instead have been compressed by a checkpoint whose record names its id: a record in
    hot (hot/memd.json), or one of `records` (memd keeps only the newest records in hot; older ones are in git).
    With `flushed_ok` too (snapshots off: no history holds the older records), a compressed note may instead be
    found as the one "note from hot" entry holding its text that a checkpoint's flush appends to the warm log
    (contract 3), and one flushed twice is a duplicate. A decision still needs a record naming it: the flush does
    not log a decision the warm log holds already (decision.record logged it), so its warm entry says nothing
    about whether a checkpoint or a bug took it out of hot."""
    out = Accounting()
    warm = Counter(e.action for e in state.entries)
    flushed_notes = Counter(
        dict(e.details).get("text") for e in state.entries if e.action == flush_identities.FLUSHED_NOTE
    )
    notes = Counter(str(n.get("text")) for n in state.notes)
    decisions = Counter(str(d.get("action")) for d in state.decisions)
    cold = Counter((lr.category, lr.text) for lr in state.learnings)
    compressed: set[str] = set()
    for record in [*state.checkpoints, *(records or [])]:
        compressed.update(str(k) for k in record.get("compressed") or [])

    seen: set[str] = set()
    for action in warm:
        label = action.removeprefix("decision: ")
        if LABEL_RE.fullmatch(label):
            seen.add(label)
    seen.update(t for t in notes if LABEL_RE.fullmatch(t))
    seen.update(a for a in decisions if LABEL_RE.fullmatch(a))
    seen.update(text for (_, text) in cold if LABEL_RE.fullmatch(text))
    out.phantom = sorted(seen - ledger.sent)[:50]

    for label in sorted(ledger.sent):
        match = LABEL_RE.fullmatch(label)
        if match is None:
            continue
        kind, client = match[1], match[2]
        places: list[tuple[str, int, bool]] = []  # (where, count, may be compressed)
        if kind == "w":
            places.append(("warm", warm[label], False))
        elif kind == "h":
            places.append(("hot notes", notes[label], True))
        elif kind == "c":
            places.append((f"cold C{client}", cold[(f"C{client}", label)], False))
        elif kind == "d":
            places += [("warm", warm[f"decision: {label}"], False), ("hot decisions", decisions[label], True)]
        acked = label in ledger.acked
        out.checked += int(acked)
        if flushed_ok and kind == "h" and flushed_notes[label] > 1:
            out.duplicated.append(f"{label} x{flushed_notes[label]} flushed to warm")
        for where, count, may_compress in places:
            if count > 1:
                out.duplicated.append(f"{label} x{count} in {where}")
            elif count == 0 and acked:
                named = ledger.acked[label] in compressed
                flushed = flushed_ok and kind == "h" and flushed_notes[label] == 1
                if compressed_ok and may_compress and (named or flushed):
                    out.compressed += 1
                else:
                    out.lost.append(f"{label} missing from {where}")
    return out


HOT_PATHS = ("hot/memd.json", "hot/context.json")


def records_in_history(repo: Path | None) -> list[dict[str, Any]]:
    """Every checkpoint record the hot files ever held in the snapshot history (one `git cat-file --batch`):
    hot/memd.json, or hot/context.json before memd's own keys moved out of it."""
    import json
    import subprocess

    if repo is None:
        return []
    env = {"PATH": os.environ.get("PATH", ""), "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent"}
    base = ["git", f"--git-dir={repo}", "-c", f"safe.directory={repo}"]
    revs = subprocess.run(
        [*base, "rev-list", "--all", "--", *HOT_PATHS], capture_output=True, env=env, timeout=60, check=False
    ).stdout.split()
    if not revs:
        return []
    batch = b"".join(rev + b":" + path.encode() + b"\n" for rev in revs for path in HOT_PATHS)  # absent: "missing"
    out = subprocess.run(
        [*base, "cat-file", "--batch"], input=batch, capture_output=True, env=env, timeout=120, check=False
    ).stdout
    records: dict[str, dict[str, Any]] = {}
    pos = 0
    while pos < len(out):
        end = out.index(b"\n", pos)
        header = out[pos:end].split()
        pos = end + 1
        if len(header) < 3 or header[1] != b"blob":
            continue
        size = int(header[2])
        blob, pos = out[pos : pos + size], pos + size + 1
        try:
            doc = json.loads(blob)
        except ValueError:
            continue
        for record in doc.get("checkpoints") or [] if isinstance(doc, dict) else []:
            if isinstance(record, dict):
                records.setdefault(str(record.get("id")), record)
    return list(records.values())


def today_utc() -> date:
    from datetime import UTC, datetime

    return datetime.now(UTC).date()
