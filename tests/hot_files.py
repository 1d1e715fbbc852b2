"""The hot tier as its two files hold it, for tests that look at the disk: `hot/context.json` (the article's session
fields) and `hot/memd.json` (memd's notes, summary, checkpoint records, version), merged as memd reads them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memd.tiers import hot_format


def context_file(root: Path) -> Path:
    return root / "hot" / hot_format.CONTEXT_FILE


def own_file(root: Path) -> Path:
    return root / "hot" / hot_format.OWN_FILE


def read_part(path: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    return data


def read_hot(root: Path) -> dict[str, Any]:
    """The merged hot document of the workspace at `root` (what `hot.get` serves, read from the disk)."""
    return hot_format.merge(read_part(context_file(root)), read_part(own_file(root)))[0]


def hot_from_git(files: dict[str, bytes]) -> dict[str, Any]:
    """The merged hot document from the files of a commit (relative path -> bytes)."""
    context, own = (files.get(f"hot/{name}") for name in (hot_format.CONTEXT_FILE, hot_format.OWN_FILE))
    return hot_format.merge(None if context is None else json.loads(context), None if own is None else json.loads(own))[
        0
    ]
