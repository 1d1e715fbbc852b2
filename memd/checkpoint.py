"""Checkpoints: budget-triggered, verified, reversible compaction of the hot tier.

When hot reaches `checkpoint_threshold` x its budget, the older notes, older decisions and the previous summary
are compressed into one `# Context Summary`. Pinned — never sent, byte-identical afterwards — are the task, the
current step, pending actions, files modified, the newest `keep_decisions` decisions and the newest notes within
`recent_share` of the budget. Steps: (1) commit the exact pre-state to git, (2) summarize outside the writer
under an overall deadline while writes go on, (3) verify (not empty, not a refusal, within its allotment so the
target is met, pinned parts untouched), (4) apply through the writer, replacing exactly the compressed entries
by key and keeping everything written meanwhile, log it to warm, record it in hot, commit the post-state.
A failure changes nothing, shows in status and backs the workspace off exponentially; a daily token cap stops
runaway spend. What to compress and the checks on a summary are memd/checkpoint_plan.py; finding, showing and
undoing a checkpoint afterwards, memd/checkpoint_history.py; the daily token ledger and cap, memd/llm_spend.py; one
checkpoint as decided, memd/checkpoint_compact.py. Imports memd.checkpoint_plan, memd.checkpoint_compact,
memd.checkpoint_history, memd.checkpoint_flush, memd.llm_spend, memd.snapshots, memd.workspace, memd.summarizer,
memd.batch, the hot format, memd.config and memd.errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memd import checkpoint_history as history
from memd.batch import Draft
from memd.checkpoint_compact import Checkpoint, Summary, summarized
from memd.checkpoint_flush import flush_to_warm, parse_recent_days
from memd.checkpoint_plan import (
    NOTHING_TO_COMPRESS,
    Plan,
    pinned,
    plan_checkpoint,
    verify_summary,
    without_fold_line,
)
from memd.config import CheckpointConfig
from memd.errors import Busy, CheckpointFailed, MemdError
from memd.llm_spend import Spend, SpendLedger, day_of
from memd.snapshots import Snapshotter
from memd.summarizer import Summarizer, SummaryRequest, SummaryResult
from memd.tiers.hot_format import HotDoc
from memd.workspace import Workspace

log = logging.getLogger(__name__)
RECORDS_KEPT = 10  # records kept in hot/memd.json; every one is also in git history and warm
# What a checkpoint's own commits hold (before and after): the tier it compresses. Its flush to the warm log, and
# whatever else changed, go into the next snapshot, seconds later: committing the whole workspace twice per
# checkpoint made each one hash and compress a big day file again.
CHECKPOINT_TIERS = frozenset({"hot"})


@dataclass
class Health:
    in_flight: bool = False
    failures: int = 0
    next_allowed: float = 0.0  # loop time before which automatic checkpoints wait (backoff)
    last_error: str = ""
    last_record: dict[str, Any] = field(default_factory=dict)
    runs: int = 0
    failed: int = 0  # failed runs since start (failures counts those in a row)
    rejected: int = 0  # LLM summaries refused by the checks (the extractive one was applied instead)
    last_rejection: str = ""
    held_until_tokens: int | None = None  # after an undo: no automatic checkpoint until hot grows past this


class Checkpointer:
    def __init__(
        self,
        config: CheckpointConfig,
        summarizer: Summarizer,
        snapshots: Snapshotter,
        max_tokens_per_day: int,
        deadline_seconds: float,
        now: Callable[[], float],
        fallback: Summarizer | None = None,
        spend_file: Path | None = None,
    ) -> None:
        self.config = config
        self.deadline_seconds = deadline_seconds
        self.summarizer = summarizer
        self.fallback = fallback  # the extractive summarizer, applied when an LLM summary fails its checks
        self.snapshots = snapshots
        self._now = now
        self.health: dict[str, Health] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        # LLM tokens spent per workspace and day, saved so that a restart does not reset the cap
        self.spend = SpendLedger(spend_file, max_tokens_per_day)

    # --- triggers --------------------------------------------------------------------------------------------

    def reconfigure(
        self, config: CheckpointConfig, summarizer: Summarizer, max_tokens_per_day: int, deadline_seconds: float
    ) -> None:
        """A reloaded config: the next checkpoint uses the new threshold, summarizer and LLM limits."""
        self.config = config
        self.summarizer = summarizer
        self.spend.max_tokens_per_day = max_tokens_per_day
        self.deadline_seconds = deadline_seconds

    def on_change(self, ws: Workspace, tiers: frozenset[str], origin: str) -> None:
        """Change listener: after any hot change, schedule a checkpoint if hot is over the threshold."""
        if "hot" in tiers:
            self.maybe_schedule(ws)

    def over_threshold(self, ws: Workspace) -> bool:
        budget = ws.config.budget
        return ws.hot.tokens >= budget.checkpoint_threshold * budget.hot

    def maybe_schedule(self, ws: Workspace) -> bool:
        health = self.health.setdefault(ws.name, Health())
        if health.held_until_tokens is not None:
            if not self.over_threshold(ws) or ws.hot.tokens > health.held_until_tokens:
                health.held_until_tokens = None  # below the threshold again, or grown since the undo: resume
            else:
                return False
        if health.in_flight or not self.over_threshold(ws) or self._now() < health.next_allowed:
            return False
        task = asyncio.get_running_loop().create_task(self._run_quietly(ws))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def _run_quietly(self, ws: Workspace) -> None:
        with contextlib.suppress(MemdError):  # recorded in health and logged by run()
            await self.run(ws, force=False)

    async def drain(self) -> None:
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # --- the checkpoint --------------------------------------------------------------------------------------

    async def run(self, ws: Workspace, force: bool) -> dict[str, Any]:
        health = self.health.setdefault(ws.name, Health())
        if health.in_flight:
            raise Busy(f"a checkpoint of {ws.name!r} is already running")
        if not force and self._now() < health.next_allowed:
            raise CheckpointFailed(f"checkpoints of {ws.name!r} are backing off after failures: {health.last_error}")
        if not force and not self.over_threshold(ws):
            raise CheckpointFailed(f"hot tier of {ws.name!r} is below the checkpoint threshold; nothing to do")
        health.in_flight = True
        try:
            record = await self._run(ws, health)
        except MemdError as exc:
            if not (force and (exc.data or {}).get("reason") == NOTHING_TO_COMPRESS):
                self._failed(ws, health, exc.message)  # a manual run with no work is an answer, not a failure
            raise
        except Exception as exc:
            self._failed(ws, health, f"{type(exc).__name__}: {exc}")
            log.exception("checkpoint of %s failed unexpectedly", ws.name)
            raise CheckpointFailed(f"checkpoint failed: {type(exc).__name__}: {exc}") from exc
        finally:
            health.in_flight = False
        health.failures = 0
        health.next_allowed = 0.0
        health.last_error = ""
        health.last_record = record
        health.runs += 1
        return record

    def _failed(self, ws: Workspace, health: Health, message: str) -> None:
        health.failures += 1
        health.failed += 1
        delay = min(self.config.backoff_max_seconds, self.config.backoff_seconds * 2 ** (health.failures - 1))
        health.next_allowed = self._now() + delay
        health.last_error = message
        log.warning(
            "checkpoint of %s failed (%d in a row, next try in %.0fs): %s", ws.name, health.failures, delay, message
        )

    async def _run(self, ws: Workspace, health: Health) -> dict[str, Any]:
        """Steps (1) to (4) of the module docstring; run() turns what they raise into status and backoff."""
        ws.hot.require_valid()
        pre_commit = await self._commit_before(ws)
        # Plan from exactly what was committed, so that everything compressed can be read back from pre_commit.
        planned_doc = ws.hot.doc
        if pre_commit:
            planned_doc = await history.doc_at(self.snapshots, ws, pre_commit)
        plan = self.plan(ws, planned_doc)
        self.spend.check_daily_cap(self.summarizer.name, ws, plan)
        summary = await self._summarize(ws, health, plan)
        checkpoint = Checkpoint(
            id=f"ckpt-{ws.clock.now().strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}",
            plan=plan,
            pre_commit=pre_commit,
            summary=summary,
            summarized=summarized(plan, planned_doc),
            flush=self.config.flush_to_warm,  # read once: a reload meanwhile cannot make only one batch flush
        )
        flushed_first = await self._flush_first(ws, checkpoint)
        record = await ws.write(lambda draft: self._apply(draft, ws, checkpoint, flushed_first))
        record = await self._commit_after(ws, checkpoint.id, record)
        log.info(
            "checkpoint %s of %s: hot %d -> %d tokens, %d entries compressed (%s)",
            checkpoint.id, ws.name, record["tokens_before"], record["tokens_after"], len(plan.entries),
            summary.result.backend,
        )  # fmt: skip
        return record

    async def _commit_before(self, ws: Workspace) -> str:
        """(1) The exact pre-state in git; no checkpoint without it while snapshots are on, as it would not be
        reversible."""
        # whole: the commit the checkpoint's record names is this machine's hot state, even just after a sync.
        # The hot tier alone: what the checkpoint compresses; the other tiers follow in the next snapshot.
        pre_commit, _ = await self.snapshots.snapshot(ws, "before checkpoint", whole=True, tiers=CHECKPOINT_TIERS)
        if self.snapshots.config.enabled and not pre_commit:
            raise CheckpointFailed(
                "the pre-checkpoint state could not be committed to git, so the checkpoint would not be reversible: "
                + (self.snapshots.status_for(ws.name).get("last_error") or "unknown snapshot error")
            )
        return pre_commit

    async def _summarize(self, ws: Workspace, health: Health, plan: Plan) -> Summary:
        """(2) and (3) A summary that passed the checks: the summarizer's, or for a refused LLM summary the
        fallback's. Outside the writer, so writes go on meanwhile."""
        request = SummaryRequest(plan.entries, plan.summary_allotment, task=str(ws.hot.doc.get("task") or ""))
        result = await self._summarize_in_time(ws, request)
        rejection = ""
        llm = self.summarizer.name != "extractive"
        try:
            text = self.verify(ws, plan, result, structured=llm)
        except CheckpointFailed as exc:
            if not llm or self.fallback is None:
                raise
            # A summary that is cut off, forges structure or drops the facts is not applied; the extractive one is,
            # so the budget still holds. The rejection shows in status and in the record.
            rejection = exc.message
            health.rejected += 1
            health.last_rejection = rejection
            log.warning("checkpoint of %s: LLM summary rejected, extractive applied instead: %s", ws.name, rejection)
            result = await self.fallback.summarize(SummaryRequest(plan.entries, request.max_tokens, task=request.task))
            text = self.verify(ws, plan, result)
        return Summary(without_fold_line(text).rstrip("\n") + "\n", result, rejection)

    async def _summarize_in_time(self, ws: Workspace, request: SummaryRequest) -> SummaryResult:
        """The summarizer's answer within the deadline; whatever it spent counts against the daily cap, a failed or
        timed-out call too."""
        try:
            result = await asyncio.wait_for(self.summarizer.summarize(request), self.deadline_seconds)
        except TimeoutError:
            self.spend.count_spend(self.summarizer.name, ws, None, request)
            raise CheckpointFailed(f"summarizer missed the {self.deadline_seconds:.0f}s deadline") from None
        except BaseException:
            self.spend.count_spend(self.summarizer.name, ws, None, request)
            raise
        self.spend.count_spend(self.summarizer.name, ws, result, request)
        return result

    @staticmethod
    async def _flush_first(ws: Workspace, checkpoint: Checkpoint) -> int:
        """The flush as a batch of its own, durable before the apply (contract 3: what a checkpoint compresses is
        in the warm log first, whatever happens to the apply)."""
        if not checkpoint.flush:
            return 0
        await parse_recent_days(ws, ws.today())
        return await ws.write(
            lambda draft: flush_to_warm(ws, draft, checkpoint.id, checkpoint.to_remove(draft.edit_hot()))
        )

    def _apply(self, draft: Draft, ws: Workspace, checkpoint: Checkpoint, flushed_first: int) -> dict[str, Any]:
        """(4) In the writer's batch: the compressed entries replaced by the summary, anything still left to flush
        logged to warm, the record kept in hot and logged."""
        plan = checkpoint.plan
        doc = draft.edit_hot()
        if str(doc.get("summary") or "") != plan.summary_before:
            raise CheckpointFailed("the summary was changed while the checkpoint ran; nothing applied")
        new, notes_left, removed, edited = checkpoint.compact(doc)
        # Writes during the call (a new step, decision or note) are fine; what must never happen is that
        # removing the compressed entries touches what is pinned now.
        pinned_now = pinned(doc, plan.keep_decisions, plan.kept_notes)
        if pinned(new, plan.keep_decisions, plan.kept_notes, notes_left) != pinned_now:
            raise CheckpointFailed("applying the summary would change pinned context; nothing applied")
        flushed = flushed_first + (flush_to_warm(ws, draft, checkpoint.id, removed) if checkpoint.flush else 0)
        tokens_after = ws.hot.count(new)
        record = self._record(draft, checkpoint, new["summary"], tokens_after, removed, edited, flushed)
        # The newest records stay in hot; older ones are in git history and the warm log.
        new["checkpoints"] = [*(doc.get("checkpoints") or []), record][-RECORDS_KEPT:]
        draft.set_hot(new)
        self._log_to_warm(draft, checkpoint, tokens_after, len(removed))
        return record

    def _record(
        self,
        draft: Draft,
        checkpoint: Checkpoint,
        summary: str,
        tokens_after: int,
        removed: list[tuple[str, dict[str, Any], str]],
        edited: list[str],
        flushed: int,
    ) -> dict[str, Any]:
        """What `memd checkpoints` lists and `memd checkpoint show` and `undo` start from."""
        plan, result, rejection = checkpoint.plan, checkpoint.summary.result, checkpoint.summary.rejection
        record = {
            "id": checkpoint.id,
            "at": draft.now.isoformat(timespec="seconds"),
            "tokens_before": plan.tokens_before,
            "tokens_after": tokens_after,
            "entries_compressed": len(removed),
            # Every key once (records before stop 41 listed them again by list, `compressed_by_list`: 30% of a busy
            # hot/memd.json, rewritten with every hot write). A key is unique in its list, twins included (keyed).
            "compressed": sorted(k for k, _, _ in removed) + (["summary"] if plan.summary_before else []),
            "kept_edited": edited,
            "summary_sha256": hashlib.sha256(summary.encode()).hexdigest(),
            "flushed_to_warm": flushed,
            "pre_commit": checkpoint.pre_commit,
            "post_commit": "",
            "backend": result.backend,
            "model": result.model,
            "llm_tokens_in": result.tokens_in,
            "llm_tokens_out": result.tokens_out,
            "request_ids": result.request_ids,
            "redactions": result.redactions,
        }
        if rejection:
            record["rejected"] = {"backend": self.summarizer.name, "reason": rejection}
        return record

    def _log_to_warm(self, draft: Draft, checkpoint: Checkpoint, tokens_after: int, compressed: int) -> None:
        rejection = checkpoint.summary.rejection
        draft.log(
            "checkpoint",
            (
                ("id", checkpoint.id),
                ("tokens_before", str(checkpoint.plan.tokens_before)),
                ("tokens_after", str(tokens_after)),
                ("entries_compressed", str(compressed)),
                ("pre_commit", checkpoint.pre_commit or "(snapshots disabled)"),
                ("backend", checkpoint.summary.result.backend),
                *((("rejected", f"{self.summarizer.name}: {rejection}"),) if rejection else ()),
            ),
            f"hot {checkpoint.plan.tokens_before} -> {tokens_after} tokens",
        )

    async def _commit_after(self, ws: Workspace, checkpoint_id: str, record: dict[str, Any]) -> dict[str, Any]:
        """The post-state in git, its commit then written into the record; with no commit (snapshots off, or a
        failure the snapshotter shows in status) the record's post_commit stays empty."""
        post_commit, _ = await self.snapshots.snapshot(
            ws,
            "after checkpoint",
            {
                "Memd-Checkpoint": checkpoint_id,
                "Memd-Tokens-Before": str(record["tokens_before"]),
                "Memd-Tokens-After": str(record["tokens_after"]),
            },
            whole=True,
            tiers=CHECKPOINT_TIERS,
        )
        if post_commit:
            record = await ws.write(lambda d: self._set_post_commit(d, checkpoint_id, post_commit))
        return record

    @staticmethod
    def _set_post_commit(draft: Draft, checkpoint_id: str, commit: str) -> dict[str, Any]:
        doc = draft.edit_hot()
        records = [dict(r) for r in doc.get("checkpoints") or []]
        found: dict[str, Any] = {}
        for r in records:
            if r.get("id") == checkpoint_id:
                r["post_commit"] = commit
                found = r
        draft.set_hot({**doc, "checkpoints": records})
        return found

    # --- planning and verification (memd/checkpoint_plan.py) ------------------------------------------------

    def plan(self, ws: Workspace, doc: HotDoc) -> Plan:
        return plan_checkpoint(self.config, ws, doc)

    def verify(self, ws: Workspace, plan: Plan, result: SummaryResult, structured: bool = False) -> str:
        return verify_summary(ws, plan, result, self.config.min_fact_coverage, structured)

    # --- the daily LLM cap (memd.llm_spend), one per workspace, shared with promotion (memd.promote_llm) --------

    def llm_tokens_left(self, ws: Workspace) -> int:
        return self.spend.left(ws.name, day_of(ws))

    def charge_llm(self, ws: Workspace, tokens: int, redactions: dict[str, int]) -> None:
        self.spend.charge(ws.name, day_of(ws), tokens, redactions)

    # --- undo and inspection (memd.checkpoint_history) ------------------------------------------------------

    async def undo(self, ws: Workspace, checkpoint_id: str) -> dict[str, Any]:
        """Put back what checkpoint `checkpoint_id` compressed (memd.checkpoint_history.undo); not while a checkpoint
        of the workspace runs, and automatic checkpoints are held afterwards until hot grows again."""
        health = self.health.setdefault(ws.name, Health())
        if health.in_flight:
            raise Busy(f"a checkpoint of {ws.name!r} is running; undo it once it has finished")
        result = await history.undo(self.snapshots, ws, checkpoint_id)
        health.held_until_tokens = ws.hot.tokens
        return result

    async def find_record(self, ws: Workspace, checkpoint_id: str) -> dict[str, Any]:
        return await history.find_record(self.snapshots, ws, checkpoint_id)

    async def show(self, ws: Workspace, checkpoint_id: str) -> dict[str, Any]:
        return await history.show(self.snapshots, ws, checkpoint_id)

    def status_for(self, name: str) -> dict[str, Any]:
        h, spend = self.health.get(name), self.spend.get(name)
        if h is None and spend is None:
            return {"runs": 0, "in_flight": False}
        h, spend = h or Health(), spend or Spend()
        wait = max(0.0, h.next_allowed - self._now())
        return {
            "runs": h.runs,
            "in_flight": h.in_flight,
            "consecutive_failures": h.failures,
            "failed": h.failed,
            "last_error": h.last_error or None,
            "backoff_seconds_left": round(wait, 1) if wait else 0,
            "last": {k: h.last_record.get(k) for k in ("id", "at", "tokens_before", "tokens_after")}
            if h.last_record
            else None,
            "llm_tokens_today": spend.tokens_today,
            "llm_tokens": spend.tokens,
            "redactions": dict(spend.redactions),
            "llm_summaries_rejected": h.rejected,
            "last_rejection": h.last_rejection or None,
            "held_after_undo": h.held_until_tokens is not None,
        }
