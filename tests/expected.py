"""Documented rules restated independently of memd's code, as test oracles."""

from __future__ import annotations

from typing import Any

from memd.tiers import hot_format
from memd.tokens import TokenCounter


def recent_window(counter: TokenCounter, notes: list[dict[str, Any]], room: float) -> list[dict[str, Any]]:
    """The newest notes whose rendered lines fit in `room` tokens: what a checkpoint pins as recent
    (docs/checkpoints.md: recent_share x the hot budget)."""
    kept: list[dict[str, Any]] = []
    used = 0
    for note in reversed(notes):
        cost = counter.count_piece(hot_format.render_note(note))
        if used + cost > room:
            break
        kept.insert(0, note)
        used += cost
    return kept
