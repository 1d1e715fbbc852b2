"""What the merges of memd's files share: a merge's result (`Merged`) and the one way a version's bytes are read
as text and written back (memd.merge_driver, memd.merge_cold).
Imports the standard library only: git starts the merge driver in a fresh process for every file it merges.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Merged:
    data: bytes
    conflicts: tuple[str, ...] = ()  # what could not be merged, for people (empty: clean)

    @property
    def clean(self) -> bool:
        return not self.conflicts


# surrogateescape: bytes that are not UTF-8 come back out of a merge exactly as they went in.


def as_text(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def as_bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")
