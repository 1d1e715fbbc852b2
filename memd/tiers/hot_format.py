"""The hot tier's document: `hot/context.json` and `hot/memd.json` parsed, merged, edited by pure functions, split
back into the two files (rendered for the context window by memd.tiers.hot_render).

The hot tier is two files. `hot/context.json` holds the session as agents written after the tiered-memory article
load it (`HotMemory(**json.load(f))`): `session_id`, `task`, `current_step`, `files_modified`, `decisions`,
`pending_actions`, plus whatever a person put there. `hot/memd.json` holds memd's own hot state: `version`,
`notes`, `summary`, `checkpoints` (and whatever a person put there). In memory they are one merged document
(`HotDoc`), and `Origin` remembers which file each key was read from, so a rewrite puts every key back where it
was; `split(..., normalize=True)` moves memd's keys to memd.json and the article's to context.json (the migration
of a file from before format 2, a restored old version, or a person's hand edit of one of memd's keys).
The document is kept as the JSON objects they are on disk so that fields memd does not know survive every rewrite.
Each edit returns a new dict (copy-on-write of the fields it touches) and never mutates its input, which lets
the workspace writer apply a batch to a draft and drop it whole if the disk write fails.
Only standard JSON is accepted (no NaN or Infinity, no number that overflows a double, no key twice in one
object, no half of a UTF-16 surrogate pair): what memd cannot write back exactly it refuses, like any other
invalid file.
Imports only memd.errors.
"""

from __future__ import annotations

import functools
import json
import math
import random
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from memd.errors import CorruptFile

SCHEMA_VERSION = 2  # 2: memd's own keys live in hot/memd.json (1: everything was in hot/context.json)
HotDoc = dict[str, Any]
CONTEXT_FILE = "context.json"  # the article's session file
OWN_FILE = "memd.json"  # memd's own hot state
# The article's HotMemory fields: what hot/context.json holds (with whatever a person adds).
ARTICLE_KEYS = ("session_id", "task", "current_step", "files_modified", "decisions", "pending_actions")
OWN_KEYS = ("version", "notes", "summary", "checkpoints")  # memd's own: in hot/memd.json
FileName = Literal["context", "own"]
Origin = Mapping[str, FileName]  # key -> the file it was read from (or written to)

_STRING_FIELDS = ("session_id", "task", "current_step", "summary")
_STRING_LIST_FIELDS = ("files_modified", "pending_actions")
_OBJECT_LIST_FIELDS = ("decisions", "notes", "checkpoints")
LIST_FIELDS = frozenset(_STRING_LIST_FIELDS + _OBJECT_LIST_FIELDS)


def empty_doc() -> HotDoc:
    return {
        "version": SCHEMA_VERSION,
        "session_id": "",
        "task": "",
        "current_step": "",
        "files_modified": [],
        "decisions": [],
        "pending_actions": [],
        "notes": [],
        "summary": "",
        "checkpoints": [],
    }


class _NotStandard(Exception):
    """JSON that Python's json module accepts but the standard (RFC 8259) and memd's own writer do not."""


def _refuse_constant(name: str) -> Any:
    raise _NotStandard(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotStandard(f"the number {text[:40]} is too large for a double (it would become Infinity)")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):  # rare: only then look for which key it was
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _NotStandard(f"the key {key!r} appears twice in one object (which value is meant?)")
            seen.add(key)
    return obj


def parse(data: bytes, where: str) -> HotDoc:
    """Parse context.json or memd.json. A file that is not a JSON object with well-typed known fields raises
    CorruptFile."""
    try:
        text = data.decode("utf-8")
        doc = json.loads(
            text,
            parse_constant=_refuse_constant,
            parse_float=_finite_float,
            object_pairs_hook=_unique_keys,
        )
    except _NotStandard as exc:
        raise CorruptFile(f"{where} is not standard JSON: {exc}; fix it, memd will not overwrite it") from None
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError, or an integer over Python's digit limit
        raise CorruptFile(f"{where} is not valid JSON ({exc}); fix or restore it, memd will not overwrite it") from None
    except RecursionError:
        raise CorruptFile(f"{where} nests arrays or objects too deeply to read; memd will not overwrite it") from None
    _refuse_lone_surrogates(doc, text, where)
    if not isinstance(doc, dict):
        raise CorruptFile(
            f"{where} must hold a JSON object, not {_JSON_TYPES.get(type(doc), 'a number')}; expected "
            f"{expected_shape()}; memd will not overwrite it"
        )
    problems = [f"'{k}' must be a string" for k in _STRING_FIELDS if k in doc and not isinstance(doc[k], str)]
    problems += [
        f"'{k}' must be a list of strings"
        for k in _STRING_LIST_FIELDS
        if k in doc and not (isinstance(doc[k], list) and all(isinstance(v, str) for v in doc[k]))
    ]
    problems += [
        f"'{k}' must be a list of objects"
        for k in _OBJECT_LIST_FIELDS
        if k in doc and not (isinstance(doc[k], list) and all(isinstance(v, dict) for v in doc[k]))
    ]
    if problems:
        raise CorruptFile(
            f"{where}: {'; '.join(problems)}; expected {expected_shape()}; memd will not overwrite it until it is fixed"
        )
    return doc


_JSON_TYPES = {list: "an array", str: "a string", bool: "true or false", type(None): "null"}
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # what a \uD800-\uDFFF escape starts with


def _refuse_lone_surrogates(doc: Any, text: str, where: str) -> None:
    """JSON may escape half of a UTF-16 pair (`"\\ud800"`) and Python reads it as a string no UTF-8 file can hold:
    adopted, every write of the file failed (an internal error), and so did logging the value to warm, a
    checkpoint and the search index. Only a file that has such an escape is looked at again."""
    if _SURROGATE_ESCAPE.search(text) is None:
        return
    try:
        _ENCODER.encode(doc).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CorruptFile(
            f"{where} holds \\u{ord(exc.object[exc.start]):04x}, half of a UTF-16 surrogate pair without the other "
            "half: no UTF-8 text can hold it; fix the escape, memd will not overwrite the file"
        ) from None
    except RecursionError:
        raise CorruptFile(f"{where} nests arrays or objects too deeply to read; memd will not overwrite it") from None


def expected_shape() -> str:
    """What `parse` accepts, for the error message a person reads when the file has the wrong shape."""
    fields = [f'"{k}": "text"' for k in _STRING_FIELDS]
    fields += [f'"{k}": ["text", ...]' for k in _STRING_LIST_FIELDS]
    fields += [f'"{k}": [{{...}}, ...]' for k in _OBJECT_LIST_FIELDS]
    return "{" + ", ".join(fields) + "} (every field optional; other fields are kept as they are)"


def serialize(doc: HotDoc, encoded: Callable[[str, list[Any]], list[str]] | None = None) -> bytes:
    """One line per field and one line per list element, so `git diff hot/context.json` shows exactly which note
    or decision changed. Each line is encoded by json's C encoder (`indent=` would force the pure-Python one,
    several times slower on a large hot tier). `encoded(key, elements)`: the JSON of each element of one of the
    known list fields (`encode_element` of each), when the caller remembers them (memd.tiers.by_identity)."""
    dumps = _ENCODER.encode  # built once: json.dumps with an option builds a new encoder per call
    lines = []
    for key, value in doc.items():
        name = dumps(key)
        if isinstance(value, list) and value:
            parts: Iterable[str] = map(_element, value)
            if encoded is not None and key in LIST_FIELDS:
                parts = encoded(key, value)
            items = ",\n    ".join(parts)
            lines.append(f"  {name}: [\n    {items}\n  ]")
        else:
            lines.append(f"  {name}: {dumps(value)}")
    return ("{\n" + ",\n".join(lines) + "\n}\n").encode("utf-8")


_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False)  # never write what parse would refuse
# Encoded list elements remembered: every batch rewrites the whole file, and the notes and decisions in it are
# the same as the batch before but one (encoding them again was ~9% of the event loop's time under 16 clients of
# hot writes, bench figure 3). Only an object whose values are all strings is remembered, keyed by its items, so
# an equal key always means the same JSON (True and 1 are equal in Python, not in JSON).
ELEMENTS_KEPT = 4096


def encode_element(value: Any) -> str:
    """The JSON of one list element as `serialize` writes it."""
    return _element(value)


def _element(value: Any) -> str:
    if type(value) is dict and all(type(v) is str for v in value.values()):
        return _encoded_items(tuple(value.items()))
    return _ENCODER.encode(value)


@functools.lru_cache(maxsize=ELEMENTS_KEPT)
def _encoded_items(items: tuple[tuple[str, str], ...]) -> str:
    return _ENCODER.encode(dict(items))


# --- the two files ------------------------------------------------------------------------------------------


def home(key: str) -> FileName:
    """The file a key belongs in: memd's own keys in memd.json, everything else in context.json."""
    return "own" if key in OWN_KEYS else "context"


def merge(context: HotDoc | None, own: HotDoc | None) -> tuple[HotDoc, dict[str, FileName]]:
    """One document from the two files (None: the file does not exist), and which file each key came from.

    A key in both files takes context.json's value: memd never writes a key to both, so it is a file from before
    format 2, a restored old version of context.json, or a person's edit there, and the newer intent wins. The
    merged order is context.json's keys, then memd.json's."""
    doc: HotDoc = {}
    origin: dict[str, FileName] = {}
    for key, value in (context or {}).items():
        doc[key] = value
        origin[key] = "context"
    for key, value in (own or {}).items():
        if key not in doc:
            doc[key] = value
            origin[key] = "own"
    return doc, origin


def needs_split(origin: Origin) -> bool:
    """Does a key sit in the other file than its home (memd's own in context.json, an article key in memd.json)?"""
    return any(home(key) != where for key, where in origin.items() if key in OWN_KEYS or key in ARTICLE_KEYS)


def split(doc: HotDoc, origin: Origin, normalize: bool) -> tuple[HotDoc, HotDoc]:
    """The document as (context.json, memd.json) objects. Each key goes back to the file it came from, a new key to
    its home; `normalize` sends memd's keys and the article's keys home too (an unknown key stays where it was)."""
    context: HotDoc = {}
    own: HotDoc = {}
    for key, value in doc.items():
        where = origin.get(key) or home(key)
        if normalize and (key in OWN_KEYS or key in ARTICLE_KEYS):
            where = home(key)
        (own if where == "own" else context)[key] = value
    return context, own


def origin_of(context: HotDoc, own: HotDoc) -> dict[str, FileName]:
    """Which file each key of a `split` went to."""
    return {**{k: "own" for k in own}, **{k: "context" for k in context}}


def new_id(prefix: str, now: datetime) -> str:
    # An id tells notes apart, it guards nothing: the process's generator (seeded from the OS at start) instead of
    # a getrandom(2) call per note (`secrets`: 2.6% of the event loop under 16 clients of hot writes).
    return f"{prefix}-{now.strftime('%Y%m%d%H%M%S')}-{random.getrandbits(24):06x}"


def _ts(now: datetime) -> str:
    return now.isoformat(timespec="seconds")


def _with(doc: HotDoc, **changes: Any) -> HotDoc:
    new = dict(doc)
    new.update(changes)
    new.setdefault("version", SCHEMA_VERSION)
    return new


def string_list(doc: HotDoc, key: str) -> list[str]:
    return list(doc.get(key) or [])


def object_list(doc: HotDoc, key: str) -> list[dict[str, Any]]:
    return list(doc.get(key) or [])


def start_session(doc: HotDoc, task: str | None, session_id: str, now: datetime) -> tuple[HotDoc, bool]:
    """Open a session. The same task (or none given) resumes; a different task starts a fresh session.

    Returns (new doc, resumed). A fresh session keeps memd's bookkeeping (checkpoints) and unknown fields.
    """
    previous_task = str(doc.get("task") or "")
    if task is None or task == previous_task:
        return _with(doc, session_id=session_id), bool(previous_task)
    fresh = _with(
        doc,
        session_id=session_id,
        task=task,
        current_step="",
        files_modified=[],
        decisions=[],
        pending_actions=[],
        notes=[],
        summary="",
    )
    return fresh, False


def update_progress(
    doc: HotDoc,
    step: str | None,
    files: Sequence[str] = (),
    pending_add: Sequence[str] = (),
    pending_done: Sequence[str] = (),
) -> tuple[HotDoc, list[str]]:
    """Returns (new doc, pending items named done that were not pending)."""
    changes: dict[str, Any] = {}
    if step is not None:
        changes["current_step"] = step
    if files:
        current = string_list(doc, "files_modified")
        seen = set(current)
        current += [f for f in dict.fromkeys(files) if f not in seen]
        changes["files_modified"] = current
    missing: list[str] = []
    if pending_add or pending_done:
        pending = string_list(doc, "pending_actions")
        for item in pending_done:
            if item in pending:
                pending.remove(item)
            else:
                missing.append(item)
        pending += [p for p in dict.fromkeys(pending_add) if p not in pending]
        changes["pending_actions"] = pending
    return _with(doc, **changes), missing


def add_decision(
    doc: HotDoc, action: str, reason: str, risk: str | None, now: datetime, id_: str | None = None
) -> tuple[HotDoc, dict[str, Any]]:
    decision: dict[str, Any] = {"action": action, "reason": reason}
    if risk is not None:
        decision["risk"] = risk
    decision.update(id=id_ or new_id("d", now), ts=_ts(now))
    return _with(doc, decisions=[*object_list(doc, "decisions"), decision]), decision


def add_note(doc: HotDoc, text: str, now: datetime, id_: str | None = None) -> tuple[HotDoc, dict[str, Any]]:
    note = {"id": id_ or new_id("n", now), "ts": _ts(now), "text": text}
    return _with(doc, notes=[*object_list(doc, "notes"), note]), note


def element_with_id(doc: HotDoc, key: str, id_: str) -> dict[str, Any] | None:
    """The element of the list `key` (notes, decisions) whose id is `id_`, or None."""
    return next((x for x in object_list(doc, key) if x.get("id") == id_), None)
