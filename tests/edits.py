"""Edits of a batch draft, as the handlers make them: for tests that drive a Workspace directly."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memd.batch import Draft


def note(text: str) -> Callable[[Draft], Any]:
    def edit(draft: Draft) -> dict[str, Any]:
        return draft.add_note(text)

    return edit
