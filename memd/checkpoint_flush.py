"""The flush before a checkpoint compresses: every note and decision it removes from hot is first appended,
verbatim, to today's warm log in the same batch as the apply, unless an identical entry is already in the warm
window, so nothing compressed leaves what `context.get` loads while the warm window lasts. Pure draft editing.
Imports memd.batch, memd.checkpoint_plan (entry keys) and memd.workspace (the warm store, for what is there).
"""

from __future__ import annotations

import json
from datetime import date
from typing import Any

from memd.batch import Draft
from memd.checkpoint_plan import keyed
from memd.tiers.digests import DigestSet
from memd.tiers.flush_identities import FLUSHED_NOTE, entry_flush_identity, flush_identity
from memd.workspace import Workspace


def entry_key_in(entry: dict[str, Any], present: set[str]) -> bool:
    return any(k in present for k, _ in keyed([entry]))


async def parse_recent_days(ws: Workspace, today: date) -> None:
    """Parse the days `flush_to_warm` looks in as a read parses them (WarmStore.load: a big parse in a worker
    thread), before the flush's batch: inside a batch the lookup runs on the event loop, and a day no read had
    parsed yet (a daemon just started on a 36 MB day) was parsed there whole, holding every client ~4 s."""
    for day in ws.warm.recent_days(today, ws.config.warm.recent_days):
        await ws.warm.load(day)
        await ws.warm.complete_let_go(day)  # a big day's first parse read its newest entries only


def flush_to_warm(
    ws: Workspace, draft: Draft, checkpoint_id: str, removed: list[tuple[str, dict[str, Any], str]]
) -> int:
    """Append every entry a checkpoint compresses, verbatim, to today's warm log (in the same batch as the apply),
    unless an identical entry is already in the warm window: a decision as decision.record logged it, a note as
    a "note from hot" entry. Returns how many were appended."""
    seen: set[bytes | None] = set()
    # A big day's older entries, no longer parsed: looked up where they are, never copied (a day of steady
    # writes lets go of ~80,000 decisions an hour; a copy at every checkpoint cost the size of the day).
    let_go: list[DigestSet] = []
    today = draft.local.date()
    for day in ws.warm.recent_days(today, ws.config.warm.recent_days):  # parsed already: parse_recent_days
        for e in ws.warm.entries_for(day):
            seen.add(entry_flush_identity(e))
        let_go.append(ws.warm.let_go_identities(day))
    for e in draft.warm:
        seen.add(entry_flush_identity(e))
    flushed = 0
    for key, entry, kind in removed:
        if kind == "note":
            text = entry.get("text")
            details = {
                "id": str(entry.get("id") or key),
                "ts": str(entry.get("ts") or ""),
                "text": text if isinstance(text, str) else json.dumps(entry, ensure_ascii=False, sort_keys=True),
            }
            action = FLUSHED_NOTE
        else:
            action = f"decision: {entry.get('action', '')}"
            details = {"reason": str(entry.get("reason") or "")}
            if entry.get("risk") is not None:
                details["risk"] = str(entry["risk"])
        identity = flush_identity(action, details)
        if identity in seen or any(identity in earlier for earlier in let_go):
            continue
        seen.add(identity)
        extra = {"checkpoint": checkpoint_id, "from": "hot"}
        if kind == "decision":
            extra["id"] = str(entry.get("id") or key)
        draft.log(action, tuple({**details, **extra}.items()))
        flushed += 1
    return flushed
