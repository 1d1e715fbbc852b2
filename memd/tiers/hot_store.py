"""The hot tier's in-memory state and its file: last good document, what memd last saw on disk, token count.

The store never writes; it hands the workspace a FileWrite and is told when it became durable (`commit`).
An invalid file on disk leaves the last good document in place for reads and blocks writes (`require_valid`).
Imports memd.fsio, memd.tokens, memd.errors and the hot format.
"""

from __future__ import annotations

from pathlib import Path

from memd import fsio
from memd.errors import CorruptFile
from memd.tiers import HOT_MAX_BYTES, hot_format, read_tier_file
from memd.tiers.hot_format import HotDoc
from memd.tokens import TokenCounter


class HotStore:
    def __init__(self, path: Path, counter: TokenCounter, max_bytes: int = HOT_MAX_BYTES) -> None:
        self.path = path
        self.max_bytes = max_bytes  # [limits] hot_max_bytes: a bigger file is refused, never read whole
        self._counter = counter
        self.doc: HotDoc = hot_format.empty_doc()
        self.fingerprint: fsio.Fingerprint | None = None
        self.error: CorruptFile | None = None
        self.tokens = 0
        self.exists = False
        self.raw: bytes | None = None  # the bytes `doc` came from (or was written as): what a publish expects there

    def load(self) -> None:
        """(Re)read the file. A corrupt file keeps the last good document and records the error."""
        fp = fsio.fingerprint(self.path)
        self.fingerprint = fp
        try:
            data = read_tier_file(self.path, self.max_bytes)
        except CorruptFile as exc:
            self.error = exc
            return
        if data is None:
            self.exists = False
            self.error = None
            self.doc = hot_format.empty_doc()
            self.raw = None
        else:
            try:
                self.doc = hot_format.parse(data, str(self.path))
                self.exists = True
                self.error = None
                self.raw = data
            except CorruptFile as exc:
                self.error = exc
        self.tokens = self.count(self.doc)

    def refresh(self) -> bool:
        """Re-read when the file changed outside memd. Returns True when it did."""
        if fsio.fingerprint(self.path) == self.fingerprint:
            return False
        self.load()
        return True

    def require_valid(self) -> None:
        if self.error is not None:
            raise CorruptFile(self.error.message, data={"path": str(self.path), "tier": "hot"})

    def count(self, doc: HotDoc) -> int:
        return self._counter.count_lines(hot_format.render_lines(doc))

    def write_for(self, doc: HotDoc) -> fsio.FileWrite:
        """A replace guarded by the bytes `doc`'s base came from: published only if the file still holds them."""
        return fsio.FileWrite(self.path, hot_format.serialize(doc), append=False, guarded=True, expected=self.raw)

    def commit(self, doc: HotDoc, write: fsio.FileWrite, fp: fsio.Fingerprint, tokens: int) -> None:
        self.doc = doc
        self.raw = write.data
        self.fingerprint = fp
        self.tokens = tokens
        self.exists = True
        self.error = None
