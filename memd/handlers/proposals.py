"""The proposals of the cold tier (cold/PROPOSED.md, filled by retention's promotion, memd.promote): list, accept,
reject, and their section of `context.get` when asked for.

Accepting is a person's curation done through the writer: one batch removes the proposal from PROPOSED.md and
inserts its line into MEMORY.md under its category with its own date (and, for a proposal that supersedes a
learning, removes that learning's line when it is still there, word for word), so both files change together or
not at all. Imports memd.handlers.access, memd.workspace, the tier formats, memd.params and memd.errors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memd.batch import Draft
from memd.errors import InvalidParams
from memd.handlers.access import Call, result_with_usage
from memd.params import Params
from memd.promote import proposal_json
from memd.textfmt import escape_inline
from memd.tiers import cold_format, proposals_format
from memd.tiers.proposals_format import Proposal

CONTEXT_HEADING = "# Proposed Learnings (not yet accepted)\n"


def _take(draft: Draft, pid: str) -> tuple[str, Proposal]:
    """PROPOSED.md's draft text without the proposal `pid`, and that proposal (InvalidParams when there is none).
    In a re-plan, a proposal the first plan took and the file no longer holds is the one taken: a person's save
    made on the first plan's publish, in the instant before memd withdrew it, has it gone already."""
    text = draft.edit_proposals()
    proposal = proposals_format.find(proposals_format.parse(text), pid)
    taken, again = draft.replayed(lambda: proposal)
    if proposal is None and again and taken is not None:
        return text, taken
    if proposal is None:
        raise InvalidParams(
            f"no proposal {pid!r} in cold/PROPOSED.md (`memd proposals` lists them; it may have been accepted, "
            "rejected or edited meanwhile)",
            data={"param": "id", "id": pid},
        )
    return proposals_format.remove(text, proposal), proposal


async def proposals_list(call: Call, p: Params) -> Any:
    ws = call.ws
    result: dict[str, Any] = {"proposals": [proposal_json(x) for x in ws.proposals.proposals]}
    if ws.proposals.error is not None:
        result["error"] = ws.proposals.error.message
    return result


def accepting(pid: str) -> Callable[[Draft], tuple[Proposal, bool]]:
    """The edit that accepts proposal `pid`: (the proposal, whether it replaced the learning it supersedes)."""

    def edit(draft: Draft) -> tuple[Proposal, bool]:
        rest, proposal = _take(draft, pid)
        memory = draft.edit_cold()
        replaced = False
        if proposal.supersedes is not None:
            old_day, old_text = proposal.supersedes
            for line, learning in cold_format.located_learnings(memory):
                if (learning.date, learning.text) == (old_day, old_text):
                    memory = cold_format.remove_line(memory, line)
                    replaced = True
                    break
        draft.cold = memory
        category = proposal.category.strip() or "Learnings"
        if not _valid_day(proposal.date):
            raise InvalidParams(
                f"proposal {pid!r} is dated {proposal.date!r}, not a calendar date YYYY-MM-DD: correct its line "
                "in cold/PROPOSED.md, then accept it again"
            )
        present = (category, proposal.date, proposal.text)
        if not any((lr.category, lr.date, lr.text) == present for lr in cold_format.parse_memory(memory)):
            draft.learn(category, proposal.text, proposal.date)  # already there: an accept cut short by a crash
        draft.proposals = rest
        return proposal, replaced

    return edit


async def proposals_accept(call: Call, p: Params) -> Any:
    ws = call.ws
    edit = accepting(p.text("id"))
    await ws.fold_appended()  # a burst's run folded in a worker, not in the accept's draft on the loop
    proposal, replaced = await ws.write(edit)
    return result_with_usage(ws, {"accepted": proposal_json(proposal), "replaced": replaced})


async def proposals_reject(call: Call, p: Params) -> Any:
    ws = call.ws
    pid = p.text("id")

    def edit(draft: Draft) -> Proposal:
        rest, proposal = _take(draft, pid)
        draft.proposals = rest
        return proposal

    proposal = await ws.write(edit)
    return result_with_usage(ws, {"rejected": proposal_json(proposal)})


def context_section(proposals: list[Proposal]) -> str:
    """The proposals as `context.get` shows them when asked (outside every budget), each line escaped (a date a
    person mistyped is shown as it is, never an error)."""
    if not proposals:
        return ""
    lines = [f"- [{escape_inline(x.date)}] {escape_inline(f'({x.id}) [{x.category}] {x.text}')}\n" for x in proposals]
    return CONTEXT_HEADING + "".join(lines)


def _valid_day(day: str) -> bool:
    try:
        cold_format.render_learning(day, "")
    except ValueError:
        return False
    return True
