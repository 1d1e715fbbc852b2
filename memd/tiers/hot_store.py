"""The hot tier's in-memory state and its two files: the merged document, what memd last saw of each file on disk,
the token count.

`hot/context.json` (the article's session fields) and `hot/memd.json` (memd's own: notes, summary, checkpoint
records, format version) are read together into one document (memd.tiers.hot_format.merge). Each file has its own
fingerprint and the bytes it was read as (or written as), so an outside edit of either is adopted, and each
rewrite is a replace guarded by exactly the bytes its batch was planned from. A batch rewrites only the files
whose content changes, memd.json before context.json, and fsio_batch.apply_writes publishes them all or none.
The store never writes; it hands the workspace FileWrites and is told when they became durable (`commit`).
An invalid file on disk leaves the last good document in place for reads and blocks writes (`require_valid`).
Imports memd.fsio, memd.fsio_batch, memd.tokens, memd.errors, the hot format and its rendering
(memd.tiers.hot_render).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memd import fsio, fsio_batch
from memd.errors import CorruptFile
from memd.tiers import HOT_MAX_BYTES, hot_format, hot_render, read_tier_file
from memd.tiers.by_identity import ByKeyAndIdentity
from memd.tiers.hot_format import FileName, HotDoc
from memd.tokens import TokenCounter


class HotStore:
    def __init__(self, path: Path, counter: TokenCounter, max_bytes: int = HOT_MAX_BYTES) -> None:
        self.path = path  # hot/context.json
        self.own_path = path.with_name(hot_format.OWN_FILE)  # hot/memd.json
        self.paths = (self.path, self.own_path)
        self.max_bytes = max_bytes  # [limits] hot_max_bytes, per file: a bigger one is refused, never read whole
        self._counter = counter
        self.doc: HotDoc = hot_format.empty_doc()
        self.origin: dict[str, FileName] = {}  # key -> the file it was read from or written to
        self.fingerprint: fsio.Fingerprint | None = None  # of context.json
        self.own_fingerprint: fsio.Fingerprint | None = None  # of memd.json
        self.error: CorruptFile | None = None
        self.tokens = 0
        self.exists = False  # context.json exists
        # The bytes each file was read as (or written as): what a publish expects there (None: no such file).
        self.raw: bytes | None = None
        self.own_raw: bytes | None = None
        self._parts: tuple[HotDoc | None, HotDoc | None] = (None, None)  # the two files as parsed, None: absent
        # Each batch encodes and counts the whole document again; its elements are those of the batch before but
        # one, so their JSON lines and token counts are remembered (memd.tiers.by_identity), and the summary's,
        # which changes only at a checkpoint.
        self._encoded = ByKeyAndIdentity(lambda _key, element: hot_format.encode_element(element))
        self._counted = ByKeyAndIdentity(self._element_tokens)
        self._summary_counted: tuple[str, int] = ("", 0)

    @property
    def needs_split(self) -> bool:
        """Is one of memd's keys in context.json (a file from before format 2, a restored old one, a person's
        edit), or an article key in memd.json? The snapshotter then commits the state and moves them home."""
        return self.error is None and hot_format.needs_split(self.origin)

    def reconfigure(self, max_bytes: int) -> None:
        """A reloaded [limits] hot_max_bytes: files read from now on are held to it."""
        self.max_bytes = max_bytes

    def load(self) -> None:
        """(Re)read both files. A corrupt one keeps the last good document and records the error."""
        self.fingerprint = fsio.fingerprint(self.path)
        self.own_fingerprint = fsio.fingerprint(self.own_path)
        try:
            data = read_tier_file(self.path, self.max_bytes)
            own_data = read_tier_file(self.own_path, self.max_bytes)
            context = None if data is None else hot_format.parse(data, str(self.path))
            own = None if own_data is None else hot_format.parse(own_data, str(self.own_path))
        except CorruptFile as exc:
            self.error = exc
            return
        self.error = None
        self.exists = data is not None
        self.raw, self.own_raw = data, own_data
        self._parts = (context, own)
        if context is None and own is None:
            self.doc, self.origin = hot_format.empty_doc(), {}
        else:
            self.doc, self.origin = hot_format.merge(context, own)
        self.tokens = self.count(self.doc)

    def looks_changed(self) -> bool:
        """Did either file change outside memd? Stat only."""
        return (
            fsio.fingerprint(self.path) != self.fingerprint or fsio.fingerprint(self.own_path) != self.own_fingerprint
        )

    def refresh(self) -> bool:
        """Re-read when either file changed outside memd. Returns True when one did."""
        if not self.looks_changed():
            return False
        self.load()
        return True

    def forget(self) -> None:
        """After a failed batch: whatever reached the disk is re-read before the next one."""
        self.fingerprint = self.own_fingerprint = None

    def require_valid(self) -> None:
        if self.error is not None:
            raise CorruptFile(self.error.message, data={"path": str(self.path), "tier": "hot"})

    def count(self, doc: HotDoc) -> int:
        """The tokens of `doc` rendered (`hot_render.render_lines`), each line counted as `TokenCounter.count_lines`
        counts it."""
        return hot_render.count_rendered(doc, self._counter.count_piece, self._summary_tokens, self._counted)

    def _element_tokens(self, key: str, element: dict[str, Any]) -> int:
        render = hot_render.render_decision if key == "decisions" else hot_render.render_note
        return self._counter.count_piece(render(element))

    def _summary_tokens(self, summary: str) -> int:
        last = self._summary_counted
        if summary == last[0]:
            return last[1]
        tokens = self._counter.count_lines(hot_render.render_summary(summary))
        self._summary_counted = (summary, tokens)
        return tokens

    def writes_for(self, doc: HotDoc, normalize: bool = False) -> HotWrites:
        """The replaces that make the two files hold `doc` (none for a file whose content stays the same), each
        guarded by the bytes its base came from: published only if the file still holds them. memd.json first:
        a crash between the two renames of a migration leaves both files holding memd's keys, and context.json's
        copy counts (hot_format.merge), which is the state before it."""
        context, own = hot_format.split(doc, self.origin, normalize or not self.origin)
        old_context, old_own = self._parts
        writes = []
        if own != (old_own or {}):
            writes.append(
                fsio_batch.FileWrite(self.own_path, hot_format.serialize(own, self._encoded), False, True, self.own_raw)
            )
        if context != (old_context or {}):
            writes.append(
                fsio_batch.FileWrite(self.path, hot_format.serialize(context, self._encoded), False, True, self.raw)
            )
        return HotWrites(writes, context, own)

    def commit(self, doc: HotDoc, planned: HotWrites, fps: Sequence[fsio.Fingerprint], tokens: int) -> None:
        """Take the published document: `planned.writes` are durable, with these fingerprints."""
        context, own = self._parts
        for write, fp in zip(planned.writes, fps, strict=True):
            if write.path == self.own_path:
                self.own_raw, self.own_fingerprint, own = write.data, fp, planned.own
            else:
                self.raw, self.fingerprint, context = write.data, fp, planned.context
                self.exists = True
        self._parts = (context, own)
        self.origin = hot_format.origin_of(context or {}, own or {})
        self.doc = doc
        self.tokens = tokens
        self.error = None


@dataclass(frozen=True)
class HotWrites:
    """What one batch writes of the hot tier: the guarded replaces, and the two files' objects they hold."""

    writes: list[fsio_batch.FileWrite]
    context: HotDoc
    own: HotDoc
