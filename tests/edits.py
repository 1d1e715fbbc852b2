"""Edits of a batch draft, as the handlers make them: for tests that drive a Workspace directly."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memd.batch import Draft
from memd.tiers import hot_format


def note(text: str) -> Callable[[Draft], Any]:
    def edit(draft: Draft) -> dict[str, Any]:
        doc, added = hot_format.add_note(draft.edit_hot(), text, draft.now)
        draft.set_hot(doc)
        return added

    return edit
