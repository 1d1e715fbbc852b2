"""`cold/PROPOSED.md` in memory: its text, the bytes it came from, what memd last saw on disk, its proposals.

A file of the cold tier that is not part of cold's budget: nothing here is counted or loaded into the context.
It is read, checked for outside edits and rewritten (guarded, whole) exactly as cold/MEMORY.md is.
Imports memd.fsio, memd.fsio_batch, memd.errors and the proposals format.
"""

from __future__ import annotations

from pathlib import Path

from memd import fsio, fsio_batch
from memd.errors import CorruptFile
from memd.tiers import COLD_MAX_BYTES, proposals_format, read_tier_file
from memd.tiers.proposals_format import Proposal

FILE_NAME = "PROPOSED.md"


class ProposalsStore:
    def __init__(self, path: Path, max_bytes: int = COLD_MAX_BYTES) -> None:
        self.path = path
        self.max_bytes = max_bytes  # [limits] cold_max_bytes, as MEMORY.md's
        self.text = ""
        self.raw: bytes | None = None  # the bytes `text` came from (or was written as): what a publish expects there
        self.fingerprint: fsio.Fingerprint | None = None
        self.error: CorruptFile | None = None
        self._proposals: list[Proposal] | None = None

    def reconfigure(self, max_bytes: int) -> None:
        """A reloaded [limits] cold_max_bytes: the file is held to it from its next read."""
        self.max_bytes = max_bytes

    def load(self) -> None:
        self.fingerprint = fsio.fingerprint(self.path)
        try:
            data = read_tier_file(self.path, self.max_bytes)
        except CorruptFile as exc:
            self.error = exc
            return
        try:
            text = "" if data is None else data.decode("utf-8")
        except UnicodeDecodeError as exc:
            self.raw = data
            self.error = CorruptFile(
                f"{self.path} is not valid UTF-8 ({exc.reason} at byte {exc.start}); fix it, memd will not rewrite it"
            )
            return
        self.text, self.raw, self._proposals, self.error = text, data, None, None

    def refresh(self) -> bool:
        if fsio.fingerprint(self.path) == self.fingerprint:
            return False
        self.load()
        return True

    def looks_changed(self) -> bool:
        return fsio.fingerprint(self.path) != self.fingerprint

    def require_valid(self) -> None:
        if self.error is not None:
            raise CorruptFile(self.error.message, data={"path": str(self.path), "tier": "cold"})

    @property
    def proposals(self) -> list[Proposal]:
        proposals = self._proposals
        if proposals is None:
            text = self.text
            proposals = proposals_format.parse(text)
            if self.text is text:  # an adoption in a worker thread may have swapped the text meanwhile
                self._proposals = proposals
        return proposals

    def write_for(self, text: str) -> fsio_batch.FileWrite:
        """A replace guarded by the bytes the current text came from (a person's save meanwhile is not lost)."""
        return fsio_batch.FileWrite(self.path, text.encode("utf-8"), append=False, guarded=True, expected=self.raw)

    def commit(self, text: str, write: fsio_batch.FileWrite, fp: fsio.Fingerprint) -> None:
        self.text, self.raw, self.fingerprint = text, write.data, fp
        self._proposals = None
        self.error = None
