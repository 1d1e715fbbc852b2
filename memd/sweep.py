"""Retention sweeps of one workspace (`retention.sweep`, the daily job): promote before expire, then delete or
archive exactly the expired warm days a dry run lists, and log it in today's warm file.

Order, each step durable before the next: (1) the expired days' candidate learnings go to cold/PROPOSED.md through
the writer (a failed write keeps every expired day); (2) the change sink commits the files to git and says what
git holds of warm/; (3) under the workspace's writer, the days are planned again and only those git holds byte
for byte (and whose candidates were taken) are removed, in a worker that runs to its end even when the sweep is
cancelled. A workspace adopted with day files of another tool only reports (`held`) until a sweep is confirmed.
Imports memd.workspace, memd.retention, memd.promote, the tier formats and memd.errors.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any

from memd import promote, retention
from memd.batch import Draft
from memd.errors import MemdError, StorageError
from memd.tiers import cold_format, proposals_format, warm_format
from memd.workspace import Workspace

log = logging.getLogger(__name__)


@dataclass
class Promotion:
    """What a sweep promotes: the days whose candidates were taken (only those may go), the candidates (None:
    promotion off), what is (or would be) proposed, and by which backend."""

    days: frozenset[str]
    candidates: list[proposals_format.Proposal] | None
    selection: promote.Selection | None
    backend: str
    fallback: str = ""  # why the configured backend was not used for some day

    def report(self) -> dict[str, Any]:
        if self.selection is None:
            return {"proposed": [], "not_proposed": [], "promote_backend": self.backend}
        out: dict[str, Any] = {
            "proposed": [promote.proposal_json(p) for p in self.selection.proposed],
            "not_proposed": [s.as_dict() for s in self.selection.skipped],
            "promote_backend": self.backend,
        }
        if self.fallback:
            out["promote_fallback"] = self.fallback
        return out


async def run(ws: Workspace, dry_run: bool, confirm: bool = False) -> dict[str, Any]:
    """Delete or archive expired warm days (exactly what a dry run lists); log it in today's warm file.
    A workspace adopted with day files only reports (`held`) until a sweep is run with `confirm`."""
    policy = ws.config.warm
    today = ws.today()
    outcome = retention.SweepOutcome()
    ws.check_identity()
    plan = retention.plan_sweep(ws.warm.directory, today, policy.retention_days)
    report_only = not dry_run and _retention_held(ws, confirm)
    promotion = await _promotion(ws, plan, chooser=None if report_only else ws.promoter())
    if promotion.candidates is not None and not dry_run and not report_only:
        # Promote before expire: the proposals are durable (an acknowledged batch) before any day goes.
        failure = await _write_proposals(ws, promotion)
        if failure:  # nothing goes: every expired day stays, and says why
            outcome.kept.update({name: failure for name in plan.expired})
    if plan.expired and not dry_run and not report_only and not outcome.kept:
        # Commits the files first (taking the writer itself) and says what git holds of warm/ (None: snapshots
        # off or without warm, nothing is checked).
        held = await ws.sink.before_destructive(ws, "retention", plan.expired)
        async with ws.exclusive:
            ws.check_identity()
            # Planned again under the writer: only what is still expired (and was just committed) goes, and
            # only a day whose candidates were taken above (the same `today`: no day can have joined).
            again = retention.plan_sweep(ws.warm.directory, today, policy.retention_days)
            plan = retention.SweepPlan(again.directory, tuple(d for d in again.expired if d in promotion.days))
            # A sweep cut short (the job's timeout, shutdown) keeps the writer until its worker has finished: a
            # restore or a sync's publish let in meanwhile would rewrite files it is still removing.
            if policy.mode == "archive":
                max_bytes = policy.archive_max_bytes
                work = functools.partial(retention.archive_expired, plan, held, max_bytes)
            else:
                work = functools.partial(retention.delete_expired, plan, held)
            try:
                outcome = await ws.in_worker_to_the_end(work)
            except OSError as exc:
                where = f" ({exc.filename})" if exc.filename else ""
                raise StorageError(
                    f"retention sweep of {ws.name!r} stopped: {exc.strerror or exc}{where}; "
                    "files not yet removed stay in warm/",
                    data={"errno": exc.errno},
                ) from None
            finally:
                ws.warm.scan()
    result: dict[str, Any] = {
        "workspace": ws.name,
        "dry_run": dry_run,
        "mode": policy.mode,
        "retention_days": policy.retention_days,
        "today": today.isoformat(),
        "expired": list(plan.expired),
        "removed": outcome.removed,
        "kept": [{"day": day, "reason": reason} for day, reason in outcome.kept.items()],
        "warnings": outcome.warnings,
        "at": ws.clock.now().isoformat(timespec="seconds"),
        **promotion.report(),
    }
    if report_only:
        return await _report_held(ws, result)
    removed = outcome.removed
    if removed:
        details: tuple[tuple[str, str], ...] = (("mode", policy.mode), ("removed", ", ".join(removed)))
        if promotion.selection is not None and promotion.selection.proposed:
            details += (("proposed", ", ".join(p.id for p in promotion.selection.proposed)),)
        try:
            await ws.write(lambda draft: draft.log("retention-sweep", details, f"{len(removed)} day file(s)"))
        except MemdError as exc:  # the files are gone either way; say why the log line is missing
            result["log_error"] = exc.message
    if not dry_run:
        ws.last_sweep = result
    return result


async def _promotion(ws: Workspace, plan: retention.SweepPlan, chooser: promote.Chooser | None) -> Promotion:
    """The candidate learnings of the days `plan` would remove, and (against MEMORY.md and PROPOSED.md as they
    are now) what would be proposed: what a dry run reports, and what a real run writes unless the files
    change in between (the selection is made again in the write's batch). `chooser`: the [promote] backend;
    None: the extractive rules (a sweep that only reports, held for an adopted workspace, spends no LLM
    tokens on days it will not remove)."""
    limit = ws.config.warm.promote_max_per_day
    days = [d for name in plan.expired if (d := warm_format.parse_day_filename(name)) is not None]
    if limit <= 0:  # promotion is off: every expired day may go
        return Promotion(frozenset(plan.expired), None, None, "off")
    candidates: list[proposals_format.Proposal] = []
    backend, fallback = "extractive", ""
    for day in days:
        ws.warm.refresh_day(day)
        entries = await ws.warm.load_all(day)  # a big day is parsed in a worker thread
        if not entries:
            continue
        found: list[proposals_format.Proposal] | None = None
        if chooser is not None:
            try:
                found = await chooser.choose(ws, day.isoformat(), entries, limit)
                backend = chooser.name
            except Exception as exc:  # any failure: the extractive rules, and the report says why
                fallback = f"{day.isoformat()}: {exc}"
                log.warning("workspace %s: promotion by %s failed, extractive instead: %s",
                            ws.name, chooser.name, exc)  # fmt: skip
        candidates += found if found is not None else promote.extract(day.isoformat(), entries)
    ws.refresh()
    selection = promote.select(candidates, ws.cold.learnings, ws.proposals.proposals, limit)
    return Promotion(frozenset(plan.expired), candidates, selection, backend, fallback)


async def _write_proposals(ws: Workspace, promotion: Promotion) -> str:
    """Write the selection (made again on the files as this batch finds them) into cold/PROPOSED.md, durably.
    Returns why it could not ("" when it could, or when there was nothing to write)."""
    candidates, limit = promotion.candidates or [], ws.config.warm.promote_max_per_day

    def edit(draft: Draft) -> promote.Selection:
        text = draft.edit_proposals()
        edited = draft.cold_if_edited()
        learnings = cold_format.parse_memory(edited) if edited is not None else ws.cold.learnings
        selection = promote.select(candidates, learnings, proposals_format.parse(text), limit)
        for proposal in selection.proposed:
            text = proposals_format.insert(text, proposal)
        if selection.proposed:
            draft.proposals = text
        return selection

    if not candidates:
        return ""
    try:
        promotion.selection = await ws.write(edit)
    except MemdError as exc:
        log.error("workspace %s: proposals not written, expired days kept: %s", ws.name, exc.message)
        return f"its candidate learnings could not be written to cold/PROPOSED.md ({exc.message}); kept"
    return ""


def _retention_held(ws: Workspace, confirm: bool) -> bool:
    """Does this real sweep only report? Yes while the workspace's adoption is pending, unless this sweep
    confirms it (which is recorded, so later sweeps run too) or warm.adopted_sweep = "run"."""
    if ws.adoption is None or not ws.adoption.pending or ws.config.warm.adopted_sweep == "run":
        return False
    if not confirm:
        return True
    ws.adoption = ws.adoption.confirmed(ws.clock.now().isoformat(timespec="seconds"))
    if ws.adoption_file is not None:
        try:
            retention.save_adoption(ws.adoption_file, ws.adoption)
        except OSError as exc:  # confirmed for this run; the next start asks again
            log.warning("workspace %s: could not record the confirmation: %s", ws.name, exc)
    log.info("workspace %s: retention confirmed; sweeps of its adopted day files run from now on", ws.name)
    return False


async def _report_held(ws: Workspace, result: dict[str, Any]) -> dict[str, Any]:
    expired = result["expired"]
    how = f"memd sweep {ws.name} --confirm (retention.sweep with confirm: true)"
    result.update(
        held=True,
        confirm=how,
        reason=(
            f"workspace {ws.name!r} had day files in warm/ before memd first served it: sweeps only report "
            f'what they would remove until one is confirmed with {how}, or warm.adopted_sweep = "run"'
        ),
    )
    if expired:
        details = (("held", ", ".join(expired)), ("confirm", how))
        note = f"held: {len(expired)} day file(s) kept until a sweep is confirmed"
        try:
            await ws.write(lambda draft: draft.log("retention-sweep", details, note))
        except MemdError as exc:
            result["log_error"] = exc.message
    ws.last_sweep = result
    return result
