"""The context payload: what an agent loads at the start of a task, each tier trimmed to its token budget.

Hot is rendered whole when it fits; over budget, the oldest notes go first, then the oldest decisions, then the
summary is cut (the pinned header — task, step, files, pending — always stays). Warm is the recent days, newest
entry first, until its budget is spent: an entry too big for what is left is passed over (a smaller older one may
still fit), and the walk stops after MAX_PASSED_OVER of those, so it costs what it returns, never the size of the
day (each entry is rendered and counted once, by the warm store). Cold is the learnings relevant to the topic,
best match first (ranked by the search index when the handler passes its ranking; by substring here otherwise).
Budgets are in tokens, never characters. Every stored value reaches the text through the tier formats' renderers,
which pass it through memd.textfmt's escaping rule: this module adds only fixed headings, so no value can add a
line or a heading to the payload. Handlers `await load_recent` first: it parses what the recent day files gained
off the event loop when that is big (WarmStore.load), so assembling the payload here never parses a file.
Imports memd.workspace, the tier formats, the hot tier's rendering (memd.tiers.hot_render) and memd.tokens.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

from memd.tiers import cold_format, hot_render, warm_format
from memd.tiers.cold_format import Learning
from memd.tiers.cold_learnings import Ranked
from memd.tiers.hot_format import HotDoc
from memd.tiers.warm_format import WarmEntry
from memd.tiers.warm_store import WarmStore
from memd.tokens import TierUsage, TokenCounter
from memd.workspace import Workspace


@dataclass(frozen=True)
class Section:
    text: str
    usage: TierUsage
    items: int  # entries or learnings included
    omitted: int  # entries or learnings left out to stay within budget
    learnings: tuple[Learning, ...] = ()  # for the cold section: exactly the learnings included


def render_hot(doc: HotDoc, counter: TokenCounter, budget: int) -> Section:
    header = hot_render.render_header(doc)
    decisions = list(doc.get("decisions") or [])
    notes = list(doc.get("notes") or [])
    summary = hot_render.render_summary(str(doc.get("summary") or ""))
    fixed = counter.count_lines(header)
    note_lines = [hot_render.render_note(n) for n in notes]
    decision_lines = [hot_render.render_decision(d) for d in decisions]
    note_costs = [counter.count_piece(line) for line in note_lines]
    decision_costs = [counter.count_piece(line) for line in decision_lines]
    summary_cost = counter.count_lines(summary)
    heading_cost = counter.count_piece("## Decisions\n") + counter.count_piece("## Notes\n")
    total = fixed + sum(note_costs) + sum(decision_costs) + summary_cost + heading_cost
    first_note = first_decision = 0
    while total > budget and first_note < len(notes):  # oldest notes leave first
        total -= note_costs[first_note]
        first_note += 1
    while total > budget and first_decision < len(decisions):
        total -= decision_costs[first_decision]
        first_decision += 1
    lines = list(header)
    if decision_lines[first_decision:]:
        lines += ["## Decisions\n", *decision_lines[first_decision:]]
    summary_text = "".join(summary)
    if total > budget and summary_text:
        summary_text = counter.truncate(summary_text, max(0, summary_cost - (total - budget)))
    lines.append(summary_text)
    if note_lines[first_note:]:
        lines += ["## Notes\n", *note_lines[first_note:]]
    text = "".join(lines)
    tokens = counter.count_by_lines(text)  # most lines were counted by the last render or write (~10% of the loop)
    if tokens > budget:  # the pinned header alone is over budget: cut it rather than overflow the window
        text = counter.truncate(text, budget)
        tokens = counter.count(text)
    return Section(text, TierUsage(tokens, budget), len(notes) - first_note, first_note + first_decision)


# Warm entries too big for what is left of the budget, looked at before the walk stops. A checkpoint's flush
# appends one entry per compressed note (about 70 tokens each, with its id, time and checkpoint), so a small warm
# budget must look past a few dozen of them to the activity beneath; each look is a cached piece, a few µs.
MAX_PASSED_OVER = 64

# An entry (day, its index in the day, the entry) rendered for the payload, and its token count.
Piece = Callable[[date, int, WarmEntry], tuple[str, int]]


def render_warm(
    days: Sequence[tuple[date, Sequence[WarmEntry]]],
    counter: TokenCounter,
    budget: int,
    piece: Piece | None = None,
    earlier: int = 0,
) -> Section:
    """The recent days' entries, newest first, within `budget`. `piece`: rendered text and token count of an
    entry (WarmStore.piece, which keeps them); by default rendered and counted here. The usage is the sum of the
    pieces' counts: text split at line ends counts the same as whole (LIMITS.md), and is not counted again."""
    if piece is None:

        def piece(_day: date, _index: int, entry: WarmEntry) -> tuple[str, int]:
            text = warm_format.render_entry(entry)
            return text, counter.count(text)

    parts: list[str] = []
    used = included = passed = 0
    total = earlier + sum(len(entries) for _, entries in days)  # `earlier`: older entries not handed in
    for day, entries in days:
        if passed > MAX_PASSED_OVER or used >= budget:
            break
        heading = f"## Activity {day.isoformat()}\n"
        heading_cost = counter.count_piece(heading)
        day_parts: list[str] = []
        for index in range(len(entries) - 1, -1, -1):
            text, cost = piece(day, index, entries[index])
            extra = heading_cost if not day_parts else 0
            if used + cost + extra > budget:
                passed += 1
                if passed > MAX_PASSED_OVER:
                    break
                continue
            used += cost + extra
            day_parts.append(text)
            included += 1
            if used >= budget:
                break
        if day_parts:
            parts += [heading, *day_parts]
    return Section("".join(parts), TierUsage(used, budget), included, total - included)


# How many learnings in a row may be passed over for not fitting before the rest of the cold tier is left unread.
COLD_MISSES = 32
# The line and token count of the learnings rendered last, per token counter: every `cold.get` and `context.get`
# renders the same newest (or best) learnings again, a full cold budget of ~280 of them in ~0.5 ms; looked up,
# ~0.03 ms. A learning is its category, date and text, so an edited one is another key. On the loop only.
LINES_KEPT = 4096
_lines: weakref.WeakKeyDictionary[TokenCounter, OrderedDict[Learning, tuple[str, int]]] = weakref.WeakKeyDictionary()


def render_cold(learnings: Sequence[Learning] | Ranked, counter: TokenCounter, budget: int) -> Section:
    """The learnings that fit in `budget`, in the order given. One that does not fit is passed over (a shorter,
    less relevant one may still fit) until COLD_MISSES in a row did not: then the rest are omitted unread, so a
    read costs what it returns, not the size of MEMORY.md (20,000 learnings took 250 ms to measure each)."""
    heading = "# Relevant Learnings\n"
    used = counter.count_piece(heading)
    lines: list[str] = []
    kept: list[Learning] = []
    misses = 0
    rendered = _lines.setdefault(counter, OrderedDict())
    for learning in learnings:
        found = rendered.get(learning)
        if found is None:
            prefix = f"[{learning.category}] " if learning.category else ""
            line = cold_format.shown_learning(learning.date, prefix + learning.text)
            found = rendered[learning] = line, counter.count_piece(line)
            if len(rendered) > LINES_KEPT:
                rendered.popitem(last=False)
        else:
            rendered.move_to_end(learning)
        line, cost = found
        if used + cost > budget:
            misses += 1
            if misses >= COLD_MISSES:
                break
            continue
        misses = 0
        used += cost
        lines.append(line)
        kept.append(learning)
    text = heading + "".join(lines) if lines else ""
    # The usage is the sum of the lines' counts, as for warm: text split at line ends counts the same apart as
    # together (LIMITS.md; a test checks the sum against a count of the text), and is not counted again.
    tokens = used if lines else 0
    return Section(text, TierUsage(tokens, budget), len(lines), len(learnings) - len(lines), tuple(kept))


# The warm sections rendered last, per workspace (2 a payload: plain, and with room for the omission notice): a
# read of a day that did not change since renders nothing. Keyed by each day's entry count and the identity of its
# last entry, which a parse replaces whenever anything in the day changed (the section holds it: no id reuse).
SECTIONS_KEPT = 4
_sections: weakref.WeakKeyDictionary[WarmStore, OrderedDict[tuple[Any, ...], tuple[Any, Section]]] = (
    weakref.WeakKeyDictionary()
)


def warm_section(
    store: WarmStore, days: Sequence[tuple[date, Sequence[WarmEntry]]], counter: TokenCounter, budget: int
) -> Section:
    """render_warm with the store's pieces, kept while the days do not change (not for an unbounded budget). The
    entries of a day that the store let go of (warm_parse.DAY_WINDOW) are older than any it keeps: counted as
    omitted. An unbounded budget (`all`) is handed whole days (load_recent's `everything`)."""
    if budget >= UNBOUNDED:
        return render_warm(days, counter, budget, store.piece)
    earlier = sum(store.first_kept(day) for day, _ in days)
    lasts = tuple(entries[-1] if entries else None for _, entries in days)
    key = (budget, id(counter), earlier, tuple((day, len(entries)) for day, entries in days), tuple(map(id, lasts)))
    kept = _sections.setdefault(store, OrderedDict())
    found = kept.get(key)
    if found is not None:
        return found[1]
    section = render_warm(days, counter, budget, store.piece, earlier)
    kept[key] = (lasts, section)
    if len(kept) > SECTIONS_KEPT:
        kept.popitem(last=False)
    return section


Recent = list[tuple[date, list[WarmEntry]]]  # the recent days' entries, newest day first


def recent_warm(ws: Workspace, days: int) -> Recent:
    return [(d, ws.warm.entries_for(d)) for d in ws.warm.recent_days(ws.today(), days)]


# Where a page of recent entries starts: before the entry with this index in this day (None: at the day's end).
Position = tuple[date, int | None]


async def recent_page(
    ws: Workspace, days: int, limit: int, before: Position | None = None
) -> tuple[list[tuple[date, list[WarmEntry]]], Position | None]:
    """One page of `warm.recent`: the newest `limit` entries of the last `days` days that come before `before`
    (None: from the newest), as (day, entries in file order), newest day first; and where the next page starts
    (None: nothing older is left; an older day file without entries can still make the next page empty). Day
    files only grow, so a position stays valid while entries are appended: paging returns every entry once. Only
    the days the page reaches are parsed."""
    page: list[tuple[date, list[WarmEntry]]] = []
    window = [d for d in ws.warm.recent_days(ws.today(), days) if before is None or d <= before[0]]
    for i, day in enumerate(window):
        entries = await ws.warm.load(day)  # the newest entries; the first `first` of the day are not in it
        first = ws.warm.first_kept(day)
        count = first + len(entries)
        end = count if before is None or day < before[0] or before[1] is None else min(before[1], count)
        start = max(0, end - limit)
        if start < first:  # the page reaches entries let go (warm_parse.DAY_WINDOW): the whole day, in a worker
            entries, first = await ws.warm.load_all(day), 0
        if end > start:
            page.append((day, entries[start - first : end - first]))
            limit -= end - start
        if start > 0:
            return page, (day, start)
        if limit == 0:
            return page, ((window[i + 1], None) if i + 1 < len(window) else None)
    return page, None


async def load_recent(ws: Workspace, days: int, everything: bool = False) -> Recent:
    """The recent days' entries, brought up to date, a big parse in a worker thread (WarmStore.load): each day's
    newest (warm_parse.DAY_WINDOW), or with `everything` all of them. Hand what it returns to `build_context` with
    no await in between: the lists stay whole even when the store lets go of a day's parse to stay within its
    bound (recent days bigger than that together), so nothing is parsed again on the loop."""
    load = ws.warm.load_all if everything else ws.warm.load
    return [(day, await load(day)) for day in ws.warm.recent_days(ws.today(), days)]


UNBOUNDED = 1 << 40  # `all`: no budget cuts anything


def build_context(
    ws: Workspace,
    topic: str | None,
    everything: bool = False,
    ranked: Ranked | None = None,
    recent: Recent | None = None,
) -> dict[str, Any]:
    """The assembled context text and its usage breakdown `{tier: {tokens, budget, percent}}`. What a budget left
    out is said in the text itself (an agent reading only the text must know it is not all), within that budget.
    `ranked`: the learnings for `topic`, best first, as the search index ranked them; None: matched here by
    substring (cold_selection.relevant), as without an index. `recent`: what `load_recent` returned (None: read
    here)."""
    budget = ws.config.budget
    counter = ws.counter
    hot, warm, cold = (UNBOUNDED,) * 3 if everything else (budget.hot, budget.warm, budget.cold)
    days = recent if recent is not None else recent_warm(ws, ws.config.warm.recent_days)
    learnings = ranked if ranked is not None else ws.cold.parsed.relevant(topic)
    renderers = {
        "hot": lambda b: render_hot(ws.hot.doc, counter, b),
        "warm": lambda b: warm_section(ws.warm, days, counter, b),
        "cold": lambda b: render_cold(learnings, counter, b),
    }
    sections: dict[str, Section] = {}
    for tier, limit in (("hot", hot), ("warm", warm), ("cold", cold)):
        section = renderers[tier](limit)
        if section.omitted:
            section = _with_notice(ws.name, tier, limit, section, renderers[tier], counter)
        sections[tier] = section
    if everything:
        sections = {
            t: Section(s.text, TierUsage(s.usage.tokens, getattr(budget, t)), s.items, s.omitted, s.learnings)
            for t, s in sections.items()
        }
    text = "\n".join(s.text.rstrip("\n") + "\n" for s in sections.values() if s.text)
    return {
        "text": text,
        "usage": {tier: s.usage.as_dict() for tier, s in sections.items()},
        "included": {tier: s.items for tier, s in sections.items()},
        "omitted": {tier: s.omitted for tier, s in sections.items()},
        "model_window": budget.model_window,
    }


def _with_notice(
    workspace: str, tier: str, limit: int, plain: Section, render: Callable[[int], Section], counter: TokenCounter
) -> Section:
    """The section re-rendered with room for the line saying what it left out, or as it was when even that line
    does not fit the budget (the `omitted` figure in the reply still says it)."""
    notice = omission_notice(workspace, tier, plain.omitted)
    section = render(max(0, limit - counter.count_piece(notice)))
    notice = omission_notice(workspace, tier, section.omitted)
    if section.text.endswith("\n"):  # pieces that end a line count the same apart as together: no recount
        text, tokens = section.text + notice, section.usage.tokens + counter.count_piece(notice)
    else:
        text = section.text + "\n" + notice if section.text else notice
        tokens = counter.count(text)
    if tokens > limit:
        return plain
    return Section(text, TierUsage(tokens, limit), section.items, section.omitted, section.learnings)


_OMITTED_WHAT = {"hot": "older notes and decisions", "warm": "older activity entries", "cold": "learnings"}


def omission_notice(workspace: str, tier: str, omitted: int) -> str:
    """One line of memd's own text (no stored value in it) saying what a budget left out and how to see it."""
    return (
        f"_({omitted} {_OMITTED_WHAT[tier]} omitted to fit the {tier} budget; "
        f"`memd context {workspace} --all` shows everything)_\n"
    )
