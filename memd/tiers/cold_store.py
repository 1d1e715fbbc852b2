"""The cold tier's in-memory state and its file: `cold/MEMORY.md` text, what memd last saw on disk, tokens.

Learnings are inserted as text edits so that everything else in the file stays byte-for-byte as its author left
it. Token counts grow by the inserted line (incremental) and are recounted whenever the file is (re)read.
Imports memd.fsio, memd.tokens, memd.errors and the cold format.
"""

from __future__ import annotations

from pathlib import Path

from memd import fsio
from memd.errors import CorruptFile
from memd.tiers import cold_format
from memd.tiers.cold_format import Learning
from memd.tokens import TokenCounter


class ColdStore:
    def __init__(self, path: Path, counter: TokenCounter) -> None:
        self.path = path
        self._counter = counter
        self.text = ""
        self.fingerprint: fsio.Fingerprint | None = None
        self.error: CorruptFile | None = None
        self.tokens = 0
        self._learnings: list[Learning] | None = None

    def load(self) -> None:
        self.fingerprint = fsio.fingerprint(self.path)
        data = fsio.read_bytes(self.path)
        try:
            self.text = "" if data is None else data.decode("utf-8")
            self.error = None
        except UnicodeDecodeError as exc:
            self.error = CorruptFile(
                f"{self.path} is not valid UTF-8 ({exc.reason} at byte {exc.start}); fix it, memd will not rewrite it"
            )
        self._learnings = None
        self.tokens = self._counter.count(self.text)

    def refresh(self) -> bool:
        if fsio.fingerprint(self.path) == self.fingerprint:
            return False
        self.load()
        return True

    def require_valid(self) -> None:
        if self.error is not None:
            raise CorruptFile(self.error.message, data={"path": str(self.path), "tier": "cold"})

    @property
    def learnings(self) -> list[Learning]:
        if self._learnings is None:
            self._learnings = cold_format.parse_memory(self.text)
        return self._learnings

    def write_for(self, text: str) -> fsio.FileWrite:
        return fsio.FileWrite(self.path, text.encode("utf-8"), append=False)

    def commit(self, text: str, fp: fsio.Fingerprint, added_tokens: int) -> None:
        self.text = text
        self.fingerprint = fp
        self.tokens += added_tokens
        self._learnings = None
        self.error = None
