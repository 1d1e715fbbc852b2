"""Which workspace a project directory uses: what `memd mcp` and `memd hook` do when no workspace is named.

From the starting directory (the hook's `cwd`, or the process's), each directory up to `/` is tried in turn, and
the nearest one that names a workspace wins. In one directory, in this order:

1. a `.memd` file (a regular file) whose first line that is neither blank nor a `#` comment is a workspace name:
   the project's own choice, which can be committed with it;
2. a workspace whose configured project directory (`[workspaces.NAME] project = "..."`) is this directory;
3. a workspace whose own directory is this directory (a discovered workspace lives in its project, or a person
   works inside the workspace itself).

An explicit `--workspace` (or $MEMD_WORKSPACE) comes before all of this. The daemon's `workspace.list` supplies
the configured and discovered workspaces and their directories; nothing here reads a memory file, and the only
file read is the project's `.memd`. Imports memd.errors.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memd.errors import UnknownWorkspace

MARKER = ".memd"
MARKER_MAX_BYTES = 4096


@dataclass(frozen=True)
class Found:
    workspace: str
    directory: Path
    why: str  # for a person: "marker /p/.memd", "project of workspace 'x'", "directory of workspace 'x'"


def marker_name(directory: Path) -> str | None:
    """The workspace a `.memd` file in `directory` names, or None (no such regular file, or no name in it)."""
    path = directory / MARKER
    try:
        if not path.is_file():
            return None
        with path.open("rb") as f:
            text = f.read(MARKER_MAX_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            return line
    return None


def _norm(path: str) -> str:
    return os.path.normpath(os.path.realpath(path))


def _index(listing: Iterable[Mapping[str, Any]], key: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for ws in listing:
        value = ws.get(key)
        if isinstance(value, str) and value:
            for form in {os.path.normpath(value), _norm(value)}:
                out.setdefault(form, []).append(str(ws["name"]))
    return out


def find_workspace(start: Path, listing: Iterable[Mapping[str, Any]]) -> Found | None:
    """The workspace for `start` (see the module's docstring), from `workspace.list`'s `workspaces`."""
    entries = list(listing)
    projects, directories = _index(entries, "project"), _index(entries, "path")
    here = Path(_norm(str(start)))
    for directory in (here, *here.parents):
        name = marker_name(directory)
        if name is not None:
            return Found(name, directory, f"marker {directory / MARKER}")
        key = str(directory)
        if key in projects:
            name = sorted(projects[key])[0]
            return Found(name, directory, f"project directory of workspace {name!r}")
        if key in directories:
            name = sorted(directories[key])[0]
            return Found(name, directory, f"directory of workspace {name!r}")
    return None


def choose_workspace(start: Path, listing: Iterable[Mapping[str, Any]]) -> str:
    """The workspace for `start`, or UnknownWorkspace saying how to bind one (none named one)."""
    entries = list(listing)
    found = find_workspace(start, entries)
    if found is not None:
        return found.workspace
    names = ", ".join(sorted(str(ws["name"]) for ws in entries)) or "none"
    raise UnknownWorkspace(
        f"no memd workspace is bound to {start} or a directory above it. Name one (--workspace NAME, "
        f"or MEMD_WORKSPACE), write its name into a {MARKER} file in the project, or set "
        f'[workspaces.NAME] project = "..." in memd\'s config. Workspaces you may use: {names}',
        data={"directory": str(start)},
    )
