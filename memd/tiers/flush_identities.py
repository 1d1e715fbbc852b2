"""What a checkpoint's flush tells warm entries apart by: a 16-byte digest of each entry it may have written.

A checkpoint's flush (memd.checkpoint_flush) appends every note and decision it compresses out of hot to the
day's warm log, unless the warm window already holds an identical entry: a decision as decision.record logged it
(its action and reason), a flushed note (`FLUSHED_NOTE`: its id and text). Which entries count as the same is the
flush's rule, not the day file's format, so it lives apart from memd.tiers.warm_format: the warm parse keeps the
identities of the entries it lets go (memd.tiers.warm_parse) and promotion reads flushed notes (memd.promote).
Pure: no I/O. Imports only the warm format (WarmEntry).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from memd.tiers.warm_format import WarmEntry

FLUSHED_NOTE = "note from hot"  # the action of a hot note a checkpoint's flush appended (memd.checkpoint_flush)


def flush_identity(action: str, details: Mapping[str, str]) -> bytes | None:
    """What a checkpoint's flush tells entries apart by (a 16-byte digest): a decision by its action and reason
    (decision.record logs it so), a flushed note by its id and text; None for any other entry, which no flush
    writes."""
    if action == FLUSHED_NOTE:
        parts: tuple[str, ...] = (action, details.get("id", ""), details.get("text", ""))
    elif action.startswith("decision: "):
        parts = (action, details.get("reason", ""))
    else:
        return None
    return hashlib.blake2b("\0".join(parts).encode("utf-8", "surrogatepass"), digest_size=16).digest()


def entry_flush_identity(entry: WarmEntry) -> bytes | None:
    """flush_identity of a parsed entry (None for every entry no flush writes), made once per entry object: a
    checkpoint's flush looks up every entry of the parsed recent days (up to three days of DAY_WINDOW entries)
    each time, and digesting them again cost ~7% of the loop under a checkpoint every few hundred hot writes
    (bench figure 3)."""
    memo = entry.flush_memo
    if memo is not None:
        return memo or None
    identity = None
    if entry.action == FLUSHED_NOTE or entry.action.startswith("decision: "):
        identity = flush_identity(entry.action, dict(entry.details))
    object.__setattr__(entry, "flush_memo", identity or _NONE)  # frozen to everyone else
    return identity


_NONE = b""  # flush_memo of an entry without an identity
