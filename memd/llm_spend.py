"""The daily LLM token ledger: what each workspace's checkpoints and promotions spent today, against
`llm.max_tokens_per_day`, kept in the state directory so that a restart does not reset the cap.

One ledger per daemon, shared by memd.checkpoint (summaries) and memd.promote_llm (through the checkpointer). A
day is the workspace clock's date; the first charge or question of a new day starts it at zero. The checkpointer's
side is here too: the cap checked before a summary, and what a summary cost charged after it. Imports memd.fsio
and memd.errors (memd.workspace, memd.checkpoint_plan and memd.summarizer for types only).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from memd import fsio
from memd.errors import CheckpointFailed

if TYPE_CHECKING:
    from memd.checkpoint_plan import Plan
    from memd.summarizer import SummaryRequest, SummaryResult
    from memd.workspace import Workspace

log = logging.getLogger(__name__)


@dataclass
class Spend:
    day: str = ""
    tokens_today: int = 0
    tokens: int = 0  # since start, never reset (metrics: a counter; tokens_today is the daily cap's)
    redactions: dict[str, int] = field(default_factory=dict)


class SpendLedger:
    def __init__(self, path: Path | None, max_tokens_per_day: int) -> None:
        self.path = path  # None: kept in memory only (tests, a daemon without a state directory)
        self.max_tokens_per_day = max_tokens_per_day
        self.by_workspace: dict[str, Spend] = {}
        self._load()

    def get(self, name: str) -> Spend | None:
        return self.by_workspace.get(name)

    def today(self, name: str, day: str) -> Spend:
        """The workspace's spend, started afresh when `day` is not the day it counts."""
        spend = self.by_workspace.setdefault(name, Spend())
        if spend.day != day:
            spend.day, spend.tokens_today = day, 0
        return spend

    def left(self, name: str, day: str) -> int:
        return max(0, self.max_tokens_per_day - self.today(name, day).tokens_today)

    def would_exceed(self, name: str, day: str, estimate: int) -> bool:
        return self.today(name, day).tokens_today + estimate > self.max_tokens_per_day

    def charge(self, name: str, day: str, tokens: int, redactions: dict[str, int]) -> None:
        """Count `tokens` (and the secrets scrubbed before sending) against today's cap, saved at once."""
        spend = self.today(name, day)
        spend.tokens_today += tokens
        spend.tokens += tokens
        for kind, n in redactions.items():
            spend.redactions[kind] = spend.redactions.get(kind, 0) + n
        self._save()

    # --- a summary's side (memd.checkpoint): the cap checked before it, its cost charged after ---------------

    def check_daily_cap(self, summarizer: str, ws: Workspace, plan: Plan) -> None:
        if summarizer == "extractive":
            return
        # The prompt's framing (instructions, labels, task) costs about as much again as a tenth of the entries.
        entries = sum(ws.counter.count(e.text) for e in plan.entries)
        estimate = entries + entries // 10 + 400 + plan.allotment
        day = day_of(ws)
        if self.would_exceed(ws.name, day, estimate):
            raise CheckpointFailed(
                f"daily LLM token cap reached for {ws.name!r} ({self.today(ws.name, day).tokens_today} used, "
                f"~{estimate} needed, llm.max_tokens_per_day = {self.max_tokens_per_day})"
            )

    def count_spend(
        self, summarizer: str, ws: Workspace, result: SummaryResult | None, request: SummaryRequest
    ) -> None:
        """What a summary cost against the daily cap: the endpoint's `usage` when it reports one, else memd's own
        estimate of every attempt (failed and timed-out ones included), which the summarizer metered."""
        if summarizer == "extractive" and (result is None or result.backend == "extractive"):
            return
        spent = request.meter.tokens or (result.tokens_in + result.tokens_out if result else 0)
        self.charge(ws.name, day_of(ws), spent, result.redactions if result is not None else {})

    def _load(self) -> None:
        if self.path is None:
            return
        try:
            data = json.loads(self.path.read_bytes())
            for name, entry in dict(data.get("workspaces") or {}).items():
                spend = self.by_workspace.setdefault(str(name), Spend())
                spend.day, spend.tokens_today = str(entry["day"]), int(entry["tokens"])
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("could not read LLM spend from %s (%s); counting from zero today", self.path, exc)

    def _save(self) -> None:
        if self.path is None:
            return
        data = {
            "workspaces": {
                name: {"day": s.day, "tokens": s.tokens_today} for name, s in self.by_workspace.items() if s.day
            }
        }
        try:
            fsio.ensure_dir(self.path.parent, 0o700)
            fsio.atomic_replace(self.path, json.dumps(data, sort_keys=True).encode(), 0o600)
        except OSError as exc:
            log.warning("could not save LLM spend to %s: %s", self.path, exc)


def day_of(ws: Workspace) -> str:
    return ws.clock.now().date().isoformat()
