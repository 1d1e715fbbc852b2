"""What one batch of writes is made of.

The `Draft` is what edits see and change; a `Batch` is a draft turned into file writes, between planning and
acknowledgement. The planner (memd.planner) makes batches, the writer (memd.writer) sequences them, and
`fsio_batch.write_batch` makes their writes durable in a worker thread. Imports the tiers, memd.early_ack and
memd.fsio_batch.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, TypeVar

from memd import fsio_batch
from memd.early_ack import EarlyAck
from memd.tiers import cold_folds, cold_format, hot_format, warm_format
from memd.tiers.cold_store import ColdStore
from memd.tiers.hot_format import HotDoc
from memd.tiers.hot_store import HotStore, HotWrites
from memd.tiers.proposals_store import ProposalsStore
from memd.tiers.warm_format import WarmEntry

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class Draft:
    """What one batch will write. Edits replace the hot document and the cold text with new values; warm entries
    accumulate. A tier is re-checked against its file (one stat) the first time an edit touches it, so a batch that
    only logs does not look at hot/ or cold/ at all."""

    now: datetime
    local: datetime
    _hot_store: HotStore
    _cold_store: ColdStore
    warm: list[WarmEntry] = field(default_factory=list)
    warm_text: list[str] = field(default_factory=list)
    hot: HotDoc | None = None  # None: no edit touched the hot tier
    cold: str | None = None  # None: no edit touched the cold tier
    # Each learning inserted into `cold`: (text before, where, what, text after), so the cold store can take the
    # batch in one insertion at a time (ColdStore.commit) instead of counting and parsing MEMORY.md again.
    cold_inserts: list[tuple[str, int, str, str]] = field(default_factory=list)
    # The blocks a burst's learnings append after the cold store's text while no edit of the batch needs it whole
    # (`cold` is None meanwhile): written as one append and kept apart by the store (ColdStore.commit_appends),
    # so that a learning does not copy MEMORY.md. An edit that needs the text makes it (`_edit_cold`).
    cold_appends: list[str] = field(default_factory=list)
    _cold_touched: bool = False  # the cold file was checked for this batch (one stat, `_touch_cold`)
    _fence_free_cold: str | None = None  # a draft text of MEMORY.md known to hold no fence (its insertions added none)
    cold_fold: cold_folds.Fold | None = None  # the fold of appended learnings this batch makes (fold_cold)
    cold_run_start: int | None = None  # where in `cold` the blocks a burst appended begin (ColdStore.run_start)
    normalize_hot: bool = False  # move memd's keys to hot/memd.json and the article's to hot/context.json
    _proposals_store: ProposalsStore | None = None
    proposals: str | None = None  # cold/PROPOSED.md's text; None: no edit touched it
    # What each request made in an earlier plan of this batch (ids, dates), by its place in the batch: a re-plan
    # makes the same ones (`replayed`). A re-plan plans on a person's save, and a save made on top of the earlier
    # plan's publish in the instant it was in place, before memd withdrew it, holds what that plan added already:
    # recognised by its id (a note, a decision) or its line (a learning), it is not added twice. A learning the
    # file held before the batch, identical in category, day and text, is taken for it too: the learning is there.
    made: dict[int, list[Any]] = field(default_factory=dict)
    _request: int = 0
    _made_now: int = 0
    # The copies of each learning (category, day, text) this plan's requests added or found in place: a re-plan
    # takes a copy in the file for its request's only when there are more than those.
    _claimed: Counter[tuple[str, str, str]] = field(default_factory=Counter)

    def set_hot(self, doc: HotDoc) -> None:
        self.hot = doc

    def begin_request(self, index: int) -> None:
        """The edits that follow are the batch's request at `index`: what they make (`replayed`) is its own."""
        self._request, self._made_now = index, 0

    def replayed(self, make: Callable[[], T]) -> tuple[T, bool]:
        """A value the current request makes (an id, a date, what it found), and whether it is the one the earlier
        plan of a re-plan made, given again (`make` is not called then)."""
        values = self.made.setdefault(self._request, [])
        at = self._made_now
        self._made_now += 1
        if at < len(values):
            return values[at], True
        value = make()
        values.append(value)
        return value, False

    def add_decision(self, action: str, reason: str, risk: str | None) -> dict[str, Any]:
        """Record a decision in the hot tier; returns it (the one in place when a re-plan finds it there)."""
        doc = self.edit_hot()
        id_, again = self.replayed(lambda: hot_format.new_id("d", self.now))
        if again and (there := hot_format.element_with_id(doc, "decisions", id_)) is not None:
            return there
        self.hot, decision = hot_format.add_decision(doc, action, reason, risk, self.now, id_)
        return decision

    def add_note(self, text: str) -> dict[str, Any]:
        """Add a note to the hot tier; returns it (the one in place when a re-plan finds it there)."""
        doc = self.edit_hot()
        id_, again = self.replayed(lambda: hot_format.new_id("n", self.now))
        if again and (there := hot_format.element_with_id(doc, "notes", id_)) is not None:
            return there
        self.hot, note = hot_format.add_note(doc, text, self.now, id_)
        return note

    def edit_hot(self) -> HotDoc:
        """The current draft hot document, after checking that the hot file is writable (not corrupt)."""
        if self.hot is None:
            self._hot_store.refresh()
            self._hot_store.require_valid()
            self.hot = self._hot_store.doc
        else:
            self._hot_store.require_valid()
        return self.hot

    def split_hot(self) -> bool:
        """Write the hot tier in its two-file layout (format 2): memd's own keys in hot/memd.json, the article's
        in hot/context.json. Returns whether anything had to move."""
        doc = self.edit_hot()
        moving = self._hot_store.needs_split
        if moving or doc.get("version") != hot_format.SCHEMA_VERSION:
            self.hot = {**doc, "version": hot_format.SCHEMA_VERSION}
        self.normalize_hot = True
        return moving

    def log(self, action: str, details: tuple[tuple[str, str], ...] = (), result: str | None = None) -> WarmEntry:
        entry = WarmEntry(time=self.local.strftime("%H:%M:%S"), action=action, details=details, result=result)
        rendered = warm_format.render_entry(entry)
        rendered.encode("utf-8")  # fail this request now, not the whole batch later
        self.warm.append(entry)
        self.warm_text.append(rendered)
        return entry

    def learn(self, category: str, text: str, day: str | None = None) -> str:
        """Add a learning dated `day` (default: today) to cold/MEMORY.md: first under its section, or, in a burst
        of learnings into a big fence-free file and from then on until a fold, at the end in a block of its own
        (memd.tiers.cold_store.FLOOD_SECONDS). Returns its date."""
        asked = day
        dated, again = self.replayed(lambda: asked or self.local.date().isoformat())
        key = (category, dated, text)
        claimed, self._claimed[key] = self._claimed[key], self._claimed[key] + 1
        if again and cold_format.learning_copies(self._edit_cold(), category, dated, text) > claimed:
            return dated  # in the file from the earlier plan's publish, which a person's save was made on (`made`)
        day = dated
        if self.cold is None and self._append_block(category, day, text):
            return day
        before = self._edit_cold()
        store = self._cold_store
        known_free = before is self._fence_free_cold
        made = None
        if self.cold_run_start is not None:  # a run is there: every learning joins it until a fold
            made = cold_format.append_learning_at(before, category, day, text)
            free = known_free
        else:
            free = known_free or store.fence_free(before)
            if free and store.flooding(before):
                made = cold_format.append_learning_at(before, category, day, text)
                if made is not None:
                    self.cold_run_start = len(before)
        after, at, added = made or cold_format.insert_learning_at(before, category, day, text, fence_free=free)
        self.cold_inserts.append((before, at, added, after))
        self.cold = after
        self._fence_free_cold = after if free and not cold_format.may_fence_after(before, at, added) else None
        return day

    def _append_block(self, category: str, day: str, text: str) -> bool:
        """Add the learning as a block to `cold_appends` if it goes at the end (a run is there, or a burst into a
        big fence-free file starts one); False when it goes under its section instead."""
        self._touch_cold()
        store = self._cold_store
        if self.cold_run_start is None:
            if self.cold_appends or not (store.flooding_now() and store.fence_free_now()):
                return False
            block = cold_format.appended_block(store.ends_with_line_end(), category, day, text)
            self.cold_run_start = store.length
        else:
            after_line_end = bool(self.cold_appends) or store.ends_with_line_end()
            block = cold_format.appended_block(after_line_end, category, day, text)
        self.cold_appends.append(block)
        return True

    def fold_cold(self, fold: cold_folds.Fold) -> bool:
        """Fold the learnings a burst appended back under their sections, as `fold` (made off the loop by
        ColdStore.prepare_fold) has them, with whatever was appended since after it. Returns whether it could (not
        when something else changed the file since the fold was made)."""
        made = self._cold_store.folded(fold, self._edit_cold(), self.cold_run_start)
        if made is None:
            return False
        self.cold, self.cold_fold, self.cold_run_start = made.text, made, made.run_start
        self.cold_inserts.clear()  # insertions made before it in this batch are in the fold
        return True

    def edit_cold(self) -> str:
        """The current draft text of cold/MEMORY.md for an edit other than a learning (accepting a proposal),
        after checking that the file is writable (not corrupt). A run of learnings a burst appended is folded
        back first, here on the loop (rare: such an edit in the seconds a burst lasts), so that no edit splits a
        run or lands inside one."""
        text = self._edit_cold()
        run_start = self.cold_run_start
        if run_start is not None:
            blocks = cold_format.parse_appended(text[run_start:])
            if blocks is not None:
                text = self.cold = cold_format.fold_appended(text[:run_start], blocks)
            self.cold_run_start = None
        return text

    def cold_if_edited(self) -> str | None:
        """The draft text of cold/MEMORY.md if an edit of this batch changed it, else None (the store's holds)."""
        return self._edit_cold() if self.cold is not None or self.cold_appends else None

    def _touch_cold(self) -> None:
        """Check the cold file once per batch (a person's edit is read first), and that it is writable."""
        if not self._cold_touched:
            self._cold_store.refresh()
            self._cold_store.require_valid()
            self.cold_run_start = self._cold_store.run_start
            self._cold_touched = True
        else:
            self._cold_store.require_valid()

    def _edit_cold(self) -> str:
        if self.cold is None:
            self._touch_cold()
            base = self._cold_store.text
            self.cold = base
            if self.cold_appends:  # the blocks appended so far become one insertion at the end
                added = "".join(self.cold_appends)
                self.cold = base + added
                self.cold_inserts.append((base, len(base), added, self.cold))
                self.cold_appends = []  # a new list: `cold_state` holds the old one, to undo this
        else:
            self._cold_store.require_valid()
        return self.cold

    def cold_state(self) -> tuple[Any, ...]:
        """Everything an edit may change of the draft's cold tier, for `restore_cold` when the edit fails."""
        return (
            self.cold,
            len(self.cold_inserts),
            self.cold_run_start,
            self.cold_fold,
            self._fence_free_cold,
            self.cold_appends,
            len(self.cold_appends),
            self._cold_touched,
        )

    def restore_cold(self, state: tuple[Any, ...]) -> None:
        """Undo a failed edit's changes to the cold tier (the text, the insertions, a fold, the run's start)."""
        self.cold, inserted, self.cold_run_start, self.cold_fold, self._fence_free_cold = state[:5]
        appends, appended, self._cold_touched = state[5:]
        del self.cold_inserts[inserted:]
        del appends[appended:]
        self.cold_appends = appends

    def edit_proposals(self) -> str:
        """The current draft text of cold/PROPOSED.md, after checking that the file is writable (not corrupt)."""
        store = self._proposals_store
        if store is None:
            raise RuntimeError("this draft has no proposals file")
        if self.proposals is None:
            store.refresh()
            store.require_valid()
            self.proposals = store.text
        else:
            store.require_valid()
        return self.proposals


Edit = Callable[[Draft], T]


@dataclass
class Batch:
    """One batch between planning and acknowledgement: the draft, the accepted requests and the file writes."""

    draft: Draft
    today: date
    accepted: list[tuple[asyncio.Future[Any], Any]]
    requests: list[tuple[Edit[Any], asyncio.Future[Any], EarlyAck | None]] = field(default_factory=list)
    replans: int = 0  # how often a person's edit made this batch plan again on their version
    warm_write: fsio_batch.FileWrite | None = None
    cold_write: fsio_batch.FileWrite | None = None
    proposals_write: fsio_batch.FileWrite | None = None
    hot_writes: HotWrites | None = None  # the replaces of hot/memd.json and hot/context.json, when any
    writes: list[fsio_batch.FileWrite] = field(default_factory=list)
    warm_tokens: int | None = None  # counted while the write is in flight
    hot_tokens: int | None = None
    refused: OSError | None = None  # the planner found the disk would refuse this batch: it fails whole
    early: list[tuple[EarlyAck, Any]] = field(default_factory=list)  # answers (and results) the worker may send
    usage_after: Mapping[str, Any] | None = None  # the usage figures the early answers carry
    as_planned: bool = False  # the worker found it durable exactly as planned: its early answers may go out
