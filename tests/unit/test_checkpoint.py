"""Specification of checkpoint policy (memd.checkpoint) and of the built-in extractive summarizer: what is pinned,
what is compressed, how the summary's allotment is computed and checked, and how failures, backoff and the daily
cap keep a checkpoint from changing anything or looping.

Workspaces are real (files in tmp_path, a fixed clock, a thread pool); summarizers are in-memory fakes;
snapshots are disabled except where the pre-state commit itself is the subject.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from clocks import START, FixedClock
from expected import recent_window
from hot_files import hot_from_git, read_hot

from memd import snapshot_history
from memd.batch import Draft
from memd.checkpoint import Checkpointer
from memd.checkpoint_plan import MIN_ALLOTMENT, NOTHING_TO_COMPRESS, SECTIONS, entry_key, without_fold_line
from memd.config import BudgetConfig, CheckpointConfig, SnapshotConfig, WorkspaceConfig
from memd.errors import Busy, CheckpointFailed
from memd.snapshots import Snapshotter
from memd.summarizer import SUMMARY_HEADING, Entry, ExtractiveSummarizer, SummaryRequest, SummaryResult, fact_tokens
from memd.tiers import hot_format, hot_render, warm_format, warm_parse, warm_store
from memd.tokens import TokenCounter
from memd.workspace import Workspace

BUDGET = BudgetConfig(hot=2000, warm=4000, cold=2000, model_window=20000)  # target 1000, recent window 400
T = TypeVar("T")


class Monotonic:
    """The checkpointer's backoff clock, moved by hand."""

    def __init__(self) -> None:
        self.value = 1000.0

    def __call__(self) -> float:
        return self.value


@dataclass
class Canned:
    """A summarizer that answers `text` (after running `during`, if any, as a write to the workspace)."""

    text: str = f"{SUMMARY_HEADING}\n- the older notes, compressed\n"
    name: str = "fake"
    tokens_in: int = 0
    tokens_out: int = 0
    during: Callable[[], Coroutine[Any, Any, Any]] | None = None
    requests: list[SummaryRequest] = field(default_factory=list)

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.requests.append(request)
        if self.during is not None:
            await self.during()
        return SummaryResult(self.text, self.name, tokens_in=self.tokens_in, tokens_out=self.tokens_out)


class Failing:
    name = "fake"

    def __init__(self) -> None:
        self.calls = 0

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.calls += 1
        raise CheckpointFailed("the endpoint is down")


HOT_PATHS = ("hot/context.json", "hot/memd.json")


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(START)


@pytest.fixture
def make_workspace(
    tmp_path: Path, counter: TokenCounter, io: ThreadPoolExecutor, clock: FixedClock
) -> Callable[..., Workspace]:
    def make(budget: BudgetConfig = BUDGET, hot: dict[str, Any] | None = None) -> Workspace:
        root = tmp_path / "alpha"
        if hot is not None:
            (root / "hot").mkdir(parents=True)
            (root / "hot" / "context.json").write_text(json.dumps(hot, indent=2), encoding="utf-8")
        ws = Workspace(WorkspaceConfig("alpha", root, budget=budget), counter, clock, io)
        ws.open()
        return ws

    return make


@pytest.fixture
def make_checkpointer(tmp_path: Path, io: ThreadPoolExecutor) -> Callable[..., Checkpointer]:
    def make(
        summarizer: Any = None,
        config: CheckpointConfig | None = None,
        max_tokens_per_day: int = 1_000_000,
        deadline: float = 10.0,
        now: Callable[[], float] | None = None,
        snapshots: Snapshotter | None = None,
    ) -> Checkpointer:
        return Checkpointer(
            config or CheckpointConfig(min_fact_coverage=0.0),  # the fakes' filler text has no facts to keep
            summarizer if summarizer is not None else Canned(),
            snapshots or Snapshotter(SnapshotConfig(enabled=False), tmp_path / "state", io),
            max_tokens_per_day,
            deadline,
            now or Monotonic(),
        )

    return make


@pytest.fixture
def git_snapshots(tmp_path: Path, io: ThreadPoolExecutor) -> Snapshotter:
    """Snapshots on, in the test's state dir; a minute's settle time, so only the checkpoint's own commits happen."""
    return Snapshotter(SnapshotConfig(settle_seconds=60), tmp_path / "state", io)


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def note_text(i: int) -> str:
    return f"note {i}: read parser/tokenize.py near line {i * 7}; the tokenizer splits on '::', lexer test {i} passes"


async def add_notes(ws: Workspace, texts: list[str]) -> list[dict[str, Any]]:
    def edit(text: str) -> Callable[[Draft], dict[str, Any]]:
        def apply(draft: Draft) -> dict[str, Any]:
            doc, note = hot_format.add_note(draft.edit_hot(), text, draft.now)
            draft.set_hot(doc)
            return note

        return apply

    return [await ws.write(edit(t)) for t in texts]


async def add_decisions(ws: Workspace, n: int) -> list[dict[str, Any]]:
    def edit(i: int) -> Callable[[Draft], dict[str, Any]]:
        def apply(draft: Draft) -> dict[str, Any]:
            doc, decision = hot_format.add_decision(draft.edit_hot(), f"decision {i}", f"reason {i}", None, draft.now)
            draft.set_hot(doc)
            return decision

        return apply

    return [await ws.write(edit(i)) for i in range(n)]


async def set_progress(ws: Workspace, step: str) -> None:
    def apply(draft: Draft) -> None:
        doc, _ = hot_format.update_progress(draft.edit_hot(), step, ["parser/tokenize.py"], ["Run the lexer tests"], ())
        draft.set_hot(doc)

    await ws.write(apply)


async def seeded(ws: Workspace, notes: int = 40, decisions: int = 6) -> None:
    await set_progress(ws, "Rewriting the tokenizer")
    await add_decisions(ws, decisions)
    await add_notes(ws, [note_text(i) for i in range(notes)])


def summary_of(counter: TokenCounter, tokens: int) -> str:
    """A well-formed summary of exactly `tokens` tokens."""
    for words in range(tokens + 1):
        text = f"{SUMMARY_HEADING}\n-" + " word" * words + "\n"
        if counter.count(text) == tokens:
            return text
    raise AssertionError(f"no summary of exactly {tokens} tokens")


# --- planning: what is pinned, what is compressed, the allotment ------------------------------------------------------


def test_the_plan_compresses_older_notes_and_decisions_and_pins_the_rest(
    make_workspace: Callable[..., Workspace], make_checkpointer: Callable[..., Checkpointer], counter: TokenCounter
) -> None:
    ws = make_workspace()
    run(seeded(ws))
    doc = ws.hot.doc
    recent = recent_window(counter, doc["notes"], 0.2 * BUDGET.hot)

    plan = make_checkpointer().plan(ws, doc)

    old_decisions, old_notes = doc["decisions"][:-3], doc["notes"][: len(doc["notes"]) - len(recent)]
    assert [(e.key, e.kind) for e in plan.entries] == [(d["id"], "decision") for d in old_decisions] + [
        (n["id"], "note") for n in old_notes
    ]
    assert [e.text for e in plan.entries if e.kind == "note"] == [n["text"] for n in old_notes]
    assert [e.text for e in plan.entries if e.kind == "decision"] == [
        f"decision {i} — reason {i}" for i in range(len(old_decisions))
    ]
    assert [e.ts for e in plan.entries] == [d["ts"] for d in old_decisions] + [n["ts"] for n in old_notes]
    assert all(e.ts for e in plan.entries)
    assert plan.kept_notes == [n["id"] for n in recent]
    assert plan.keep_decisions == 3
    assert plan.tokens_before == ws.hot.tokens


def test_fixed_parts_plus_the_allotment_fit_the_target(
    make_workspace: Callable[..., Workspace], make_checkpointer: Callable[..., Checkpointer]
) -> None:
    ws = make_workspace()
    run(seeded(ws))
    doc = ws.hot.doc
    target = BUDGET.checkpoint_target * BUDGET.hot

    plan = make_checkpointer().plan(ws, doc)

    kept = [n for n in doc["notes"] if n["id"] in plan.kept_notes]
    fixed = ws.hot.count({**doc, "notes": kept, "decisions": doc["decisions"][-3:], "summary": ""})
    assert plan.allotment >= MIN_ALLOTMENT
    assert fixed + plan.allotment <= target
    assert target - (fixed + plan.allotment) < 8  # the room left over is only the rounding and a "## Notes" line


def test_a_summary_that_uses_its_whole_allotment_leaves_hot_at_or_below_the_target(
    make_workspace: Callable[..., Workspace], make_checkpointer: Callable[..., Checkpointer], counter: TokenCounter
) -> None:
    ws = make_workspace()
    run(seeded(ws))
    allotment = make_checkpointer().plan(ws, ws.hot.doc).summary_allotment  # the fold line takes the rest
    summarizer = Canned(summary_of(counter, allotment))

    record = run(make_checkpointer(summarizer).run(ws, force=True))

    assert summarizer.requests[0].max_tokens == allotment
    assert record["tokens_after"] == ws.hot.tokens <= BUDGET.checkpoint_target * BUDGET.hot
    assert record["tokens_before"] > record["tokens_after"]


def test_the_recent_window_gives_up_its_oldest_notes_before_the_target_is_missed(
    make_workspace: Callable[..., Workspace], make_checkpointer: Callable[..., Checkpointer], counter: TokenCounter
) -> None:
    ws = make_workspace()
    run(seeded(ws, notes=30, decisions=3))
    target = BUDGET.checkpoint_target * BUDGET.hot
    # A step so long that the pinned parts leave the recent window's notes too little room under the target.
    step = "Rewriting the tokenizer:"
    while ws.hot.count({**ws.hot.doc, "current_step": step, "notes": [], "summary": ""}) < target - 130:
        step += " a very detailed plan"
    run(set_progress(ws, step))
    doc = ws.hot.doc
    natural = recent_window(counter, doc["notes"], 0.2 * BUDGET.hot)
    assert sum(counter.count_piece(hot_render.render_note(n)) for n in natural) > 100

    plan = make_checkpointer().plan(ws, doc)

    assert plan.summary_allotment >= MIN_ALLOTMENT
    assert 0 < len(plan.kept_notes) < len(natural)
    assert plan.kept_notes == [n["id"] for n in doc["notes"][-len(plan.kept_notes) :]]  # still the newest
    assert {e.key for e in plan.entries} >= {n["id"] for n in natural[: len(natural) - len(plan.kept_notes)]}


def test_pinned_parts_alone_over_the_target_refuse_the_checkpoint(
    make_workspace: Callable[..., Workspace], make_checkpointer: Callable[..., Checkpointer]
) -> None:
    ws = make_workspace()
    run(seeded(ws, notes=30, decisions=3))
    run(set_progress(ws, "Rewriting the tokenizer: " + "a very detailed plan " * 300))

    with pytest.raises(CheckpointFailed, match="alone exceed the checkpoint target of 1000 tokens"):
        make_checkpointer().plan(ws, ws.hot.doc)


def test_nothing_old_enough_to_compress_is_refused(
    make_workspace: Callable[..., Workspace], make_checkpointer: Callable[..., Checkpointer]
) -> None:
    ws = make_workspace()
    run(seeded(ws, notes=3, decisions=3))

    with pytest.raises(CheckpointFailed, match="nothing in 'alpha' is old enough to compress") as caught:
        make_checkpointer().plan(ws, ws.hot.doc)
    assert caught.value.data == {"reason": NOTHING_TO_COMPRESS}  # a forced run answers "nothing to do", no failure


def test_the_previous_summary_is_compressed_again(
    make_workspace: Callable[..., Workspace], make_checkpointer: Callable[..., Checkpointer]
) -> None:
    ws = make_workspace()
    run(seeded(ws))
    run(make_checkpointer().run(ws, force=True))
    run(add_notes(ws, [note_text(i) for i in range(100, 130)]))

    plan = make_checkpointer().plan(ws, ws.hot.doc)

    # memd's own fold line is not compressed: the next checkpoint writes it anew with the running count.
    assert plan.entries[0] == Entry("summary", "summary", without_fold_line(ws.hot.doc["summary"]))
    assert "- (folds in" not in plan.entries[0].text
    assert plan.summary_before == ws.hot.doc["summary"]


# --- entries other tools wrote (no ids) -------------------------------------------------------------------------------

RECIPE_HOT = {
    "session_id": "sess-20260321-001",
    "task": "Refactor authentication module",
    "current_step": "Extracting JWT logic",
    "files_modified": ["auth/jwt.py", "auth/utils.py"],
    "decisions": [{"action": f"Split module {i}", "reason": f"File {i} exceeded 500 lines"} for i in range(6)],
    "pending_actions": ["Add tests for jwt_utils.py"],
    "custom_field": {"keep": True},
}


def test_recipe_decisions_without_ids_are_compressed_by_their_content_key(
    make_workspace: Callable[..., Workspace], make_checkpointer: Callable[..., Checkpointer]
) -> None:
    ws = make_workspace(hot=RECIPE_HOT)
    old, kept = RECIPE_HOT["decisions"][:3], RECIPE_HOT["decisions"][3:]

    checkpointer = make_checkpointer()
    plan = checkpointer.plan(ws, ws.hot.doc)
    record = run(checkpointer.run(ws, force=True))

    assert [e.key for e in plan.entries] == [entry_key(d) for d in old]
    assert all(e.key.startswith("sha256:") for e in plan.entries)
    assert record["compressed"] == sorted(entry_key(d) for d in old)
    doc = ws.hot.doc
    assert doc["decisions"] == kept
    assert doc["custom_field"] == {"keep": True}
    assert {k: doc[k] for k in ("task", "current_step", "files_modified", "pending_actions")} == {
        k: RECIPE_HOT[k] for k in ("task", "current_step", "files_modified", "pending_actions")
    }


def test_a_pinned_recipe_decision_equal_to_a_compressed_one_is_kept(
    make_workspace: Callable[..., Workspace], make_checkpointer: Callable[..., Checkpointer]
) -> None:
    again = {"action": "Run the test suite", "reason": "before every merge"}
    decisions = [dict(again), {"action": "B", "reason": "b"}, dict(again), {"action": "C", "reason": "c"}]
    decisions.append({"action": "D", "reason": "d"})
    ws = make_workspace(hot={**RECIPE_HOT, "decisions": decisions})

    run(make_checkpointer().run(ws, force=True))

    assert ws.hot.doc["decisions"] == decisions[-3:]


def test_a_note_without_id_whose_twin_is_compressed_stays_pinned_and_the_checkpoint_applies_and_shows_it(
    make_workspace: Callable[..., Workspace],
    make_checkpointer: Callable[..., Checkpointer],
    git_snapshots: Snapshotter,
) -> None:
    # Another tool's notes carry no id and are keyed by content and occurrence: the older twin is `sha256:…`, the
    # newer `sha256:…#1`. Removing the older must not make the guard see the newer (pinned) one vanish, or every
    # checkpoint of the workspace is refused from then on.
    twin = {"ts": "2026-03-21T09:00:00+00:00", "text": "the build needs LD_LIBRARY_PATH=/opt/ssl/lib"}
    notes = [dict(twin)] + [{"ts": "2026-03-21T09:05:00+00:00", "text": note_text(i)} for i in range(40)]
    notes.append(dict(twin))
    ws = make_workspace(hot={**RECIPE_HOT, "notes": notes})
    checkpointer = make_checkpointer(snapshots=git_snapshots)
    plan = checkpointer.plan(ws, ws.hot.doc)
    assert entry_key(twin) in [e.key for e in plan.entries]
    assert entry_key(twin) + "#1" in plan.kept_notes

    record = run(checkpointer.run(ws, force=True))

    assert entry_key(twin) in record["compressed"] and "compressed_by_list" not in record
    kept = ws.hot.doc["notes"]
    assert kept[-1] == twin
    assert kept.count(twin) == 1
    compressed = set(record["compressed"])
    assert kept == [n for n in notes[1:-1] if entry_key(n) not in compressed] + [twin]
    shown = run(checkpointer.show(ws, record["id"]))
    assert [{k: e[k] for k in ("ts", "text")} for e in shown["original_entries"] if e["kind"] == "note"] == [
        n for n in notes[:-1] if entry_key(n) in compressed
    ]


# --- verification ----------------------------------------------------------------------------------------------------


@pytest.fixture
def planned(
    make_workspace: Callable[..., Workspace], make_checkpointer: Callable[..., Checkpointer]
) -> tuple[Checkpointer, Workspace, Any]:
    ws = make_workspace()
    run(seeded(ws))
    checkpointer = make_checkpointer()
    return checkpointer, ws, checkpointer.plan(ws, ws.hot.doc)


def verify(planned: tuple[Checkpointer, Workspace, Any], text: str) -> str:
    checkpointer, ws, plan = planned
    return checkpointer.verify(ws, plan, SummaryResult(text, "fake"))


@pytest.mark.parametrize(
    "text",
    [
        "I'm sorry, I can't help with that.",
        "I am sorry, but I cannot summarize these notes.",
        "Im sorry, that is not possible.",
        "I can't do that.",
        "I cannot comply with this request.",
        "As an AI language model, I do not keep notes.",
        "Error: the context length was exceeded.",
        "Sorry, I can only help with coding questions.",
        "I apologize, but these notes contain sensitive data.",
        "Unable to summarize the provided content.",
        f"{SUMMARY_HEADING}\nI'm sorry, I can't help with that.",
        f"{SUMMARY_HEADING}\n\n  As an AI, I cannot do this.\n",
    ],
)
def test_an_error_or_refusal_instead_of_a_summary_is_rejected(
    planned: tuple[Checkpointer, Workspace, Any], text: str
) -> None:
    with pytest.raises(CheckpointFailed, match="error or refusal"):
        verify(planned, text)


@pytest.mark.parametrize(
    "text",
    [
        "- Error handling moved to parser/errors.py",
        "- Sorry-path in the lexer removed; unable-to-parse inputs now raise ParseError",
        "- I can't reproduce the flaky test locally (seen twice on CI)",
    ],
)
def test_a_summary_that_merely_mentions_errors_or_apologies_is_accepted(
    planned: tuple[Checkpointer, Workspace, Any], text: str
) -> None:
    assert verify(planned, text) == f"{SUMMARY_HEADING}\n{text}\n"


@pytest.mark.parametrize("text", ["", "   \n\n", SUMMARY_HEADING, f"{SUMMARY_HEADING}\n\n"])
def test_an_empty_summary_is_rejected(planned: tuple[Checkpointer, Workspace, Any], text: str) -> None:
    with pytest.raises(CheckpointFailed, match="empty"):
        verify(planned, text)


def test_the_heading_is_added_when_missing_and_the_text_ends_with_one_newline(
    planned: tuple[Checkpointer, Workspace, Any],
) -> None:
    assert verify(planned, "- tokenizer split\n- lexer tests green") == (
        f"{SUMMARY_HEADING}\n- tokenizer split\n- lexer tests green\n"
    )
    assert verify(planned, f"\n{SUMMARY_HEADING}\n- tokenizer split\n\n\n") == f"{SUMMARY_HEADING}\n- tokenizer split\n"


def test_a_summary_over_its_allotment_is_rejected_and_one_at_it_is_accepted(
    planned: tuple[Checkpointer, Workspace, Any], counter: TokenCounter
) -> None:
    allotment = planned[2].summary_allotment

    assert verify(planned, summary_of(counter, allotment)) == summary_of(counter, allotment)
    with pytest.raises(CheckpointFailed, match=f"over its allotment of {allotment}"):
        verify(planned, summary_of(counter, allotment + 1))


# --- applying: writes made meanwhile, failures that change nothing ----------------------------------------------------


def test_notes_written_while_the_summarizer_works_are_kept_and_compressed_ones_removed(
    make_workspace: Callable[..., Workspace], make_checkpointer: Callable[..., Checkpointer]
) -> None:
    ws = make_workspace()
    run(seeded(ws))
    late: list[dict[str, Any]] = []

    async def write_meanwhile() -> None:
        late.extend(await add_notes(ws, [f"late note {i}" for i in range(20)]))

    record = run(make_checkpointer(Canned(during=write_meanwhile)).run(ws, force=True))

    notes = ws.hot.doc["notes"]
    assert notes[-20:] == late
    assert not {n["id"] for n in notes + ws.hot.doc["decisions"]} & set(record["compressed"])
    assert read_hot(ws.root) == ws.hot.doc


def test_a_progress_update_while_the_summarizer_works_is_kept_and_the_checkpoint_still_applies(
    make_workspace: Callable[..., Workspace], make_checkpointer: Callable[..., Checkpointer]
) -> None:
    # docs/checkpoints.md, step 4: writes made during the call are kept; the summary only replaces what it compressed.
    ws = make_workspace()
    run(seeded(ws))

    record = run(make_checkpointer(Canned(during=lambda: set_progress(ws, "Writing the lexer"))).run(ws, force=True))

    assert ws.hot.doc["current_step"] == "Writing the lexer"
    assert ws.hot.doc["checkpoints"][-1]["id"] == record["id"]


def test_a_hand_edit_during_the_call_that_would_unpin_recent_decisions_trips_the_guard_and_changes_nothing(
    make_workspace: Callable[..., Workspace], make_checkpointer: Callable[..., Checkpointer]
) -> None:
    # Six decisions, three kept: the plan compresses decisions 0-2. While the summarizer works, a person deletes
    # decisions 3-5 from hot/context.json by hand, so the compressed ones are now the newest: removing them would
    # strip the pinned window (the last three decisions) bare. The guard must refuse and leave the person's file.
    ws = make_workspace()
    run(seeded(ws, decisions=6))
    path = ws.root / "hot" / "context.json"

    async def person_trims_the_recent_decisions() -> None:
        doc = json.loads(path.read_bytes())
        assert [d["action"] for d in doc["decisions"]] == [f"decision {i}" for i in range(6)]
        doc["decisions"] = doc["decisions"][:3]
        path.write_text(json.dumps(doc, indent=2), encoding="utf-8")

    checkpointer = make_checkpointer(Canned(during=person_trims_the_recent_decisions))
    with pytest.raises(CheckpointFailed) as failed:
        run(checkpointer.run(ws, force=True))
    edited = path.read_bytes()

    assert failed.value.message == "applying the summary would change pinned context; nothing applied"

    assert [d["action"] for d in json.loads(edited)["decisions"]] == ["decision 0", "decision 1", "decision 2"]
    assert "summary" not in json.loads(edited) or not json.loads(edited)["summary"]
    assert checkpointer.status_for("alpha")["consecutive_failures"] == 1
    run(add_notes(ws, ["a write after the refused checkpoint"]))  # the writer goes on, on top of the person's edit
    assert [d["action"] for d in ws.hot.doc["decisions"]] == ["decision 0", "decision 1", "decision 2"]


def test_a_summarizer_past_the_deadline_fails_and_changes_nothing(
    make_workspace: Callable[..., Workspace], make_checkpointer: Callable[..., Checkpointer]
) -> None:
    ws = make_workspace()
    run(seeded(ws))
    before = [p.read_bytes() for p in ws.hot.paths]

    with pytest.raises(CheckpointFailed, match="deadline"):
        run(make_checkpointer(Canned(during=lambda: asyncio.sleep(30)), deadline=0.05).run(ws, force=True))

    assert [p.read_bytes() for p in ws.hot.paths] == before


def test_a_second_checkpoint_while_one_runs_is_busy(
    make_workspace: Callable[..., Workspace], make_checkpointer: Callable[..., Checkpointer]
) -> None:
    ws = make_workspace()
    run(seeded(ws))

    async def go() -> None:
        release = asyncio.Event()
        checkpointer = make_checkpointer(Canned(during=release.wait))
        first = asyncio.ensure_future(checkpointer.run(ws, force=True))
        while not checkpointer.status_for("alpha")["in_flight"]:
            await asyncio.sleep(0.01)
        with pytest.raises(Busy) as busy:
            await checkpointer.run(ws, force=True)
        assert busy.value.message == "a checkpoint of 'alpha' is already running"
        with pytest.raises(Busy) as undo:
            await checkpointer.undo(ws, "ckpt-any")
        assert undo.value.message == "a checkpoint of 'alpha' is running; undo it once it has finished"
        assert checkpointer.maybe_schedule(ws) is False  # over the threshold, but one is in flight
        release.set()
        await first

    run(go())


# --- backoff and the daily cap ---------------------------------------------------------------------------------------


def test_failures_back_off_exponentially_up_to_the_maximum_and_a_success_resets(
    make_workspace: Callable[..., Workspace], make_checkpointer: Callable[..., Checkpointer]
) -> None:
    ws = make_workspace()
    run(seeded(ws))
    now = Monotonic()
    failing = Failing()
    checkpointer = make_checkpointer(
        failing, config=CheckpointConfig(backoff_seconds=10, backoff_max_seconds=35, min_fact_coverage=0.0), now=now
    )

    waits = []
    for _ in range(4):
        with pytest.raises(CheckpointFailed):
            run(checkpointer.run(ws, force=True))
        waits.append(checkpointer.status_for("alpha")["backoff_seconds_left"])

    assert waits == [10, 20, 35, 35]
    status = checkpointer.status_for("alpha")
    assert status["consecutive_failures"] == 4 and status["last_error"] == "the endpoint is down"
    assert status["failed"] == 4
    checkpointer.summarizer = Canned()
    run(checkpointer.run(ws, force=True))
    status = checkpointer.status_for("alpha")
    assert status["consecutive_failures"] == 0 and status["last_error"] is None and status["runs"] == 1


def test_status_says_everything_about_a_workspaces_checkpoints_and_starts_from_the_saved_spend(
    make_workspace: Callable[..., Workspace], tmp_path: Path, io: ThreadPoolExecutor
) -> None:
    ws = make_workspace()
    run(seeded(ws))
    now = Monotonic()
    spend_file = tmp_path / "state" / "llm-spend.json"
    spend_file.parent.mkdir(parents=True)
    spend_file.write_text('{"workspaces": {"beta": {"day": "2024-03-15", "tokens": 123}}}', encoding="utf-8")
    checkpointer = Checkpointer(
        CheckpointConfig(backoff_seconds=10, min_fact_coverage=0.0),
        Failing(),
        Snapshotter(SnapshotConfig(enabled=False), tmp_path / "state", io),
        1_000_000,
        10.0,
        now,
        spend_file=spend_file,
    )
    quiet = {
        "runs": 0,
        "in_flight": False,
        "consecutive_failures": 0,
        "failed": 0,
        "last_error": None,
        "backoff_seconds_left": 0,
        "last": None,
        "llm_tokens_today": 0,
        "llm_tokens": 0,
        "redactions": {},
        "llm_summaries_rejected": 0,
        "last_rejection": None,
        "held_after_undo": False,
    }
    assert checkpointer.status_for("alpha") == {"runs": 0, "in_flight": False}
    assert checkpointer.status_for("beta") == {**quiet, "llm_tokens_today": 123}  # spent before a restart

    with pytest.raises(CheckpointFailed):
        run(checkpointer.run(ws, force=True))
    failed = {**quiet, "consecutive_failures": 1, "failed": 1, "last_error": "the endpoint is down"}
    assert checkpointer.status_for("alpha") == {**failed, "backoff_seconds_left": 10}
    now.value += 2.46
    assert checkpointer.status_for("alpha") == {**failed, "backoff_seconds_left": 7.5}
    now.value += 7.54
    assert checkpointer.status_for("alpha") == failed

    checkpointer.summarizer = Described()
    record = run(checkpointer.run(ws, force=True))

    assert checkpointer.status_for("alpha") == {
        **quiet,
        "runs": 1,
        "failed": 1,
        "last": {k: record[k] for k in ("id", "at", "tokens_before", "tokens_after")},
        "llm_tokens_today": 10,
        "llm_tokens": 10,
        "redactions": {"aws": 1},
    }


def test_a_hot_change_schedules_a_checkpoint_once_hot_reaches_the_threshold_and_other_tiers_never_do(
    make_workspace: Callable[..., Workspace], make_checkpointer: Callable[..., Checkpointer]
) -> None:
    ws = make_workspace()
    run(seeded(ws, notes=60))
    tokens = ws.hot.tokens
    at = make_workspace(budget=replace(BUDGET, hot=tokens, checkpoint_threshold=1.0))  # exactly at the threshold
    below = make_checkpointer()
    assert below.over_threshold(at) is True
    just_below = make_workspace(budget=replace(BUDGET, hot=tokens + 1, checkpoint_threshold=1.0))
    assert below.over_threshold(just_below) is False

    ws = make_workspace()
    checkpointer = make_checkpointer()

    async def go() -> list[int]:
        runs = []
        for tiers in ({"warm"}, {"cold"}, {"hot"}):
            checkpointer.on_change(ws, frozenset(tiers), "write")
            await checkpointer.drain()
            runs.append(checkpointer.status_for("alpha")["runs"])
        return runs

    assert run(go()) == [0, 0, 1]


def test_after_an_undo_automatic_checkpoints_wait_until_hot_grows_again(
    make_workspace: Callable[..., Workspace],
    make_checkpointer: Callable[..., Checkpointer],
    git_snapshots: Snapshotter,
) -> None:
    ws = make_workspace()
    run(seeded(ws, notes=60))
    checkpointer = make_checkpointer(snapshots=git_snapshots)
    record = run(checkpointer.run(ws, force=True))

    async def go() -> list[bool]:
        await checkpointer.undo(ws, record["id"])
        assert checkpointer.over_threshold(ws)  # everything is back: over the threshold again
        scheduled = [checkpointer.maybe_schedule(ws), checkpointer.status_for("alpha")["held_after_undo"]]
        await add_notes(ws, ["one more note after the undo"])
        scheduled.append(checkpointer.maybe_schedule(ws))
        await checkpointer.drain()
        scheduled.append(checkpointer.status_for("alpha")["held_after_undo"])
        return scheduled

    assert run(go()) == [False, True, True, False]
    assert checkpointer.status_for("alpha")["runs"] == 2


def test_a_reload_gives_the_next_checkpoint_its_summarizer_cap_and_deadline(
    make_workspace: Callable[..., Workspace], make_checkpointer: Callable[..., Checkpointer]
) -> None:
    ws = make_workspace()
    run(seeded(ws))
    checkpointer = make_checkpointer(Canned())
    spender = Canned(name="openai")

    checkpointer.reconfigure(CheckpointConfig(min_fact_coverage=0.0, keep_decisions=1), spender, 5, 10.0)
    with pytest.raises(CheckpointFailed, match=r"llm.max_tokens_per_day = 5\)"):
        run(checkpointer.run(ws, force=True))
    assert spender.requests == []

    slow = Canned(name="openai", during=lambda: asyncio.sleep(1))
    checkpointer.reconfigure(CheckpointConfig(min_fact_coverage=0.0, keep_decisions=1), slow, 1_000_000, 0.05)
    with pytest.raises(CheckpointFailed, match="missed the 0s deadline"):
        run(checkpointer.run(ws, force=True))

    checkpointer.reconfigure(CheckpointConfig(min_fact_coverage=0.0, keep_decisions=1), spender, 1_000_000, 10.0)
    run(checkpointer.run(ws, force=True))
    assert len(spender.requests) == 1
    assert len(ws.hot.doc["decisions"]) == 1  # the reloaded keep_decisions


class Broken:
    name = "openai"

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        raise RuntimeError("a bug in the summarizer")


def test_an_unexpected_error_fails_the_checkpoint_with_its_type_logged_with_its_traceback_and_backed_off(
    make_workspace: Callable[..., Workspace],
    make_checkpointer: Callable[..., Checkpointer],
    caplog: pytest.LogCaptureFixture,
) -> None:
    ws = make_workspace()
    run(seeded(ws, notes=60))
    now = Monotonic()
    checkpointer = make_checkpointer(
        Broken(), config=CheckpointConfig(backoff_seconds=10, min_fact_coverage=0.0), now=now
    )

    with pytest.raises(CheckpointFailed) as failed:
        run(checkpointer.run(ws, force=False))

    assert failed.value.message == "checkpoint failed: RuntimeError: a bug in the summarizer"
    status = checkpointer.status_for("alpha")
    assert (status["in_flight"], status["consecutive_failures"], status["failed"]) == (False, 1, 1)
    assert status["last_error"] == "RuntimeError: a bug in the summarizer"
    logged = [
        (r.levelname, r.getMessage(), r.exc_info is not None) for r in caplog.records if r.name == "memd.checkpoint"
    ]
    assert logged == [
        (
            "WARNING",
            "checkpoint of alpha failed (1 in a row, next try in 10s): RuntimeError: a bug in the summarizer",
            False,
        ),
        ("ERROR", "checkpoint of alpha failed unexpectedly", True),
    ]
    with pytest.raises(CheckpointFailed, match="backing off after failures: RuntimeError: a bug in the summarizer"):
        run(checkpointer.run(ws, force=False))
    now.value += 10  # exactly the end of the backoff: the next automatic run goes ahead
    checkpointer.summarizer = Canned()
    run(checkpointer.run(ws, force=False))
    assert checkpointer.status_for("alpha")["runs"] == 1


def test_a_manual_checkpoint_with_nothing_to_compress_is_an_answer_and_an_automatic_one_below_the_threshold_too(
    make_workspace: Callable[..., Workspace], make_checkpointer: Callable[..., Checkpointer]
) -> None:
    ws = make_workspace()
    run(set_progress(ws, "only pinned context"))
    checkpointer = make_checkpointer()

    with pytest.raises(CheckpointFailed) as manual:
        run(checkpointer.run(ws, force=True))
    with pytest.raises(CheckpointFailed) as automatic:
        run(checkpointer.run(ws, force=False))

    assert manual.value.data == {"reason": "nothing_to_compress"}
    assert automatic.value.message == "hot tier of 'alpha' is below the checkpoint threshold; nothing to do"
    status = checkpointer.status_for("alpha")
    assert (status["consecutive_failures"], status["failed"], status["runs"]) == (0, 0, 0)


def test_promotions_spend_through_the_same_daily_cap_and_a_record_is_found_by_its_id(
    make_workspace: Callable[..., Workspace], make_checkpointer: Callable[..., Checkpointer], clock: FixedClock
) -> None:
    ws = make_workspace()
    run(seeded(ws))
    checkpointer = make_checkpointer(max_tokens_per_day=100_000)

    checkpointer.charge_llm(ws, 300, {"aws": 1})

    assert checkpointer.llm_tokens_left(ws) == 99_700
    status = checkpointer.status_for("alpha")
    assert (status["llm_tokens_today"], status["redactions"]) == (300, {"aws": 1})
    clock.current = START + timedelta(days=1)
    assert checkpointer.llm_tokens_left(ws) == 100_000
    record = run(checkpointer.run(ws, force=True))
    assert run(checkpointer.find_record(ws, record["id"]))["id"] == record["id"]


class MeteredFailure:
    """An LLM summarizer whose call fails after sending: what it sent is metered, as the openai backend does."""

    name = "openai"

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        request.meter.tokens += 1234
        raise CheckpointFailed("the endpoint closed the connection")


def test_a_failed_llm_call_is_charged_what_it_sent_and_the_extractive_summarizer_never_touches_the_ledger(
    make_workspace: Callable[..., Workspace], tmp_path: Path, io: ThreadPoolExecutor, counter: TokenCounter
) -> None:
    ws = make_workspace()
    run(seeded(ws))
    spend_file = tmp_path / "state" / "llm-spend.json"

    def checkpointer(summarizer: Any) -> Checkpointer:
        snapshots = Snapshotter(SnapshotConfig(enabled=False), tmp_path / "state", io)
        config = CheckpointConfig(min_fact_coverage=0.0)
        return Checkpointer(config, summarizer, snapshots, 1_000_000, 10.0, Monotonic(), spend_file=spend_file)

    run(checkpointer(ExtractiveSummarizer(counter)).run(ws, force=True))
    assert not spend_file.exists()

    failing = checkpointer(MeteredFailure())
    run(seeded(ws))
    with pytest.raises(CheckpointFailed):
        run(failing.run(ws, force=True))
    assert failing.status_for("alpha")["llm_tokens_today"] == 1234
    assert json.loads(spend_file.read_bytes())["workspaces"]["alpha"]["tokens"] == 1234


def test_the_daily_cap_allows_a_checkpoint_whose_estimate_just_fits_and_refuses_one_token_more(
    make_workspace: Callable[..., Workspace], make_checkpointer: Callable[..., Checkpointer], counter: TokenCounter
) -> None:
    # The estimate before a call: the entries' tokens, a tenth more and 400 for the prompt's framing, and the
    # summary's allotment.
    ws = make_workspace()
    run(seeded(ws))
    spender = Canned(name="openai")
    checkpointer = make_checkpointer(spender, max_tokens_per_day=100_000)
    plan = checkpointer.plan(ws, ws.hot.doc)
    entries = sum(counter.count(e.text) for e in plan.entries)
    estimate = entries + entries // 10 + 400 + plan.allotment

    checkpointer.charge_llm(ws, 100_000 - estimate + 1, {})
    with pytest.raises(CheckpointFailed, match=f"~{estimate} needed"):
        run(checkpointer.run(ws, force=True))
    assert spender.requests == []

    fresh = make_checkpointer(spender, max_tokens_per_day=100_000)
    fresh.charge_llm(ws, 100_000 - estimate, {})
    run(fresh.run(ws, force=True))
    assert len(spender.requests) == 1


def test_automatic_checkpoints_wait_out_the_backoff(
    make_workspace: Callable[..., Workspace], make_checkpointer: Callable[..., Checkpointer]
) -> None:
    ws = make_workspace()
    run(seeded(ws, notes=60))
    assert ws.hot.tokens >= BUDGET.checkpoint_threshold * BUDGET.hot
    now = Monotonic()
    failing = Failing()
    checkpointer = make_checkpointer(
        failing, config=CheckpointConfig(backoff_seconds=10, min_fact_coverage=0.0), now=now
    )

    async def go() -> list[bool]:
        scheduled = [checkpointer.maybe_schedule(ws)]
        await checkpointer.drain()
        scheduled.append(checkpointer.maybe_schedule(ws))  # 0 s after the failure
        with pytest.raises(CheckpointFailed, match="backing off"):
            await checkpointer.run(ws, force=False)
        now.value += 10
        scheduled.append(checkpointer.maybe_schedule(ws))
        await checkpointer.drain()
        return scheduled

    assert run(go()) == [True, False, True]
    assert failing.calls == 2


def test_the_daily_token_cap_refuses_before_calling_the_summarizer_and_resets_the_next_day(
    make_workspace: Callable[..., Workspace], make_checkpointer: Callable[..., Checkpointer], clock: FixedClock
) -> None:
    ws = make_workspace()
    run(seeded(ws))
    spender = Canned(name="openai", tokens_in=99_000, tokens_out=500)
    checkpointer = make_checkpointer(spender, max_tokens_per_day=100_000)

    run(checkpointer.run(ws, force=True))
    run(add_notes(ws, [note_text(i) for i in range(100, 140)]))
    with pytest.raises(CheckpointFailed, match=r"daily LLM token cap reached .*99500 used"):
        run(checkpointer.run(ws, force=True))
    assert len(spender.requests) == 1
    assert checkpointer.status_for("alpha")["llm_tokens_today"] == 99_500

    clock.current = START + timedelta(days=1)
    run(checkpointer.run(ws, force=True))
    assert len(spender.requests) == 2


def test_the_extractive_summarizer_spends_nothing_and_is_not_capped(
    make_workspace: Callable[..., Workspace], make_checkpointer: Callable[..., Checkpointer], counter: TokenCounter
) -> None:
    ws = make_workspace()
    run(seeded(ws))

    record = run(make_checkpointer(ExtractiveSummarizer(counter), max_tokens_per_day=1).run(ws, force=True))

    assert record["backend"] == "extractive"
    assert record["tokens_after"] <= BUDGET.checkpoint_target * BUDGET.hot


# --- the pre-state commit -------------------------------------------------------------------------------------------


def test_a_checkpoints_commits_hold_the_hot_tier_alone_and_the_next_snapshot_commits_the_rest(
    make_workspace: Callable[..., Workspace],
    make_checkpointer: Callable[..., Checkpointer],
    git_snapshots: Snapshotter,
) -> None:
    import subprocess

    ws = make_workspace()
    run(seeded(ws))  # decisions are logged to the warm day too
    run(ws.write(lambda d: d.learn("Parsing", "the tokenizer splits on '::'")))
    checkpointer = make_checkpointer(Described(), snapshots=git_snapshots)

    async def checkpoint() -> dict[str, Any]:
        git_snapshots.on_change(ws, frozenset({"hot", "warm", "cold"}), "writes")  # as the workspace reports them
        return await checkpointer.run(ws, force=True)

    record = run(checkpoint())

    repo = git_snapshots.repo_state(ws).repo
    assert repo is not None

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", f"--git-dir={repo.git_dir}", *args], capture_output=True, text=True, check=True
        ).stdout

    for commit in (record["pre_commit"], record["post_commit"]):
        changed = git("show", "--name-only", "--format=", commit).split()
        assert changed and all(path.startswith("hot/") for path in changed), changed
    day = sorted(p.name for p in (ws.root / "warm").glob("*.md"))
    assert day, "the checkpoint flushed nothing to the warm log?"
    assert git("ls-tree", "-r", "--name-only", "HEAD").split() == ["hot/context.json", "hot/memd.json"]
    assert git_snapshots.repo_state(ws).dirty == {"warm", "cold"}  # still to commit: the next snapshot does

    head, made = run(git_snapshots.snapshot(ws, "writes"))

    assert made and not git_snapshots.repo_state(ws).dirty
    for path in (f"warm/{day[-1]}", "cold/MEMORY.md"):
        assert git("show", f"{head}:{path}") == (ws.root / path).read_text("utf-8")


class LateWriter(Snapshotter):
    """A real snapshotter; right after the pre-state commit, a large note lands (another client's write)."""

    async def snapshot(self, ws: Workspace, reason: str, *args: Any, **kwargs: Any) -> tuple[str, bool]:
        result = await super().snapshot(ws, reason, *args, **kwargs)
        if reason == "before checkpoint":
            await add_notes(ws, ["pasted build log: " + "compiler output line " * 200])
        return result


def test_every_compressed_entry_is_in_the_pre_state_commit_even_with_a_write_right_after_it(
    make_workspace: Callable[..., Workspace],
    make_checkpointer: Callable[..., Checkpointer],
    io: ThreadPoolExecutor,
    tmp_path: Path,
) -> None:
    ws = make_workspace()
    run(seeded(ws))
    snapshots = LateWriter(SnapshotConfig(), tmp_path / "state", io)
    checkpointer = make_checkpointer(snapshots=snapshots)

    async def go() -> tuple[dict[str, Any], dict[str, Any]]:
        record = await checkpointer.run(ws, force=True)
        files = {path: await snapshot_history.show(snapshots, ws, record["pre_commit"], path) for path in HOT_PATHS}
        return record, hot_from_git(files)

    record, pre = run(go())

    assert record["pre_commit"]
    in_pre_state = {entry_key(e) for e in pre.get("notes", []) + pre.get("decisions", [])}
    assert set(record["compressed"]) <= in_pre_state


# --- the extractive summarizer ----------------------------------------------------------------------------------------

ENTRIES = [
    Entry("summary", "summary", f"{SUMMARY_HEADING}\n- carried: lexer rewrite started\n- (2 older entries omitted)\n"),
    *[Entry(f"d-{i}", "decision", f"use recursive descent {i} — simpler errors (risk: low)") for i in range(3)],
    *[
        Entry(f"n-{i}", "note", note_text(i) + "\nsecond line not kept", f"2024-03-15T09:{i:02d}:00+00:00")
        for i in range(40)
    ],
]


@pytest.mark.parametrize("max_tokens", [40, 64, 100, 250, 1000, 5000])
def test_extractive_summaries_fit_their_allotment_and_are_deterministic(counter: TokenCounter, max_tokens: int) -> None:
    request = SummaryRequest(ENTRIES, max_tokens)

    first = run(ExtractiveSummarizer(counter).summarize(request))
    second = run(ExtractiveSummarizer(counter).summarize(request))

    assert first == second
    assert first.backend == "extractive"
    assert counter.count(first.text) <= max_tokens
    assert first.text.startswith(f"{SUMMARY_HEADING}\n")


def test_extractive_summaries_keep_whole_fact_bearing_sentences_in_time_order_and_count_what_has_no_room(
    counter: TokenCounter,
) -> None:
    text = run(ExtractiveSummarizer(counter).summarize(SummaryRequest(ENTRIES, 150))).text
    bullets = text.splitlines()[1:]

    kept_notes = [b for b in bullets if b.startswith("- [2024-03-15T09:")]
    assert kept_notes, text
    assert kept_notes == sorted(kept_notes)  # time order, whatever yielded
    for bullet in kept_notes:  # whole sentences with their path and numbers, never cut mid-word
        assert "parser/tokenize.py near line" in bullet and bullet.endswith(";")
    assert "second line not kept" not in text  # a sentence with no identifier, number or error yields first
    assert bullets[-1].startswith("- (") and bullets[-1].endswith(
        " older entries without room here: in the warm log and git)"
    )
    omitted = int(bullets[-1].removeprefix("- (").split()[0])
    assert omitted + len(bullets) - 1 == 1 + 3 + 40  # the carried bullet, 3 decisions, 40 notes


def test_extractive_summaries_keep_identifiers_numbers_paths_and_errors_from_every_sentence(
    counter: TokenCounter,
) -> None:
    note = (
        "Looked at the cache again. The LRU in src/cache/lru.py evicts after 300 s. "
        "Nothing else today. ERR_CONN_RESET came from the proxy on port 8443, fixed by keepalive_timeout = 75."
    )
    text = run(ExtractiveSummarizer(counter).summarize(SummaryRequest([Entry("n-1", "note", note)], 500))).text

    for fact in ("src/cache/lru.py", "300 s", "ERR_CONN_RESET", "8443", "keepalive_timeout = 75"):
        assert fact in text, (fact, text)
    assert "Nothing else today" not in text


def test_a_note_with_a_huge_run_without_spaces_is_summarized_without_holding_the_loop_for_minutes(
    counter: TokenCounter,
) -> None:
    """The fuzz suite stored 300,000 `x`s as a note; the checkpoint's fact scoring backtracked over the run from
    every position in it (quadratic: 9 s for 20,000, minutes for 300,000, all on the event loop, every client
    waiting). Such a run is no fact: it is left out of the scoring, and the facts around it are still kept (this
    test exceeds pytest's timeout on the quadratic code)."""
    blob = "x" * 300_000
    note = f"Stored the fixture {blob}. It lives in tests/data/blob.txt and loading it took 1500 ms."
    entries = [Entry("n-1", "note", note), Entry("n-2", "note", f"{blob} then ERR_X")]

    text = run(ExtractiveSummarizer(counter).summarize(SummaryRequest(entries, 400))).text

    assert "It lives in tests/data/blob.txt and loading it took 1500 ms." in text, text[:300]
    assert fact_tokens(note) == {"tests/data/blob.txt", "1500 ms"}
    path = "src/" + "a" * 192 + ".py"  # 199 characters: up to MAX_FACT_CHARS a run is still read
    assert fact_tokens(f"{path} and {path}x" + "/b" * 200) == {path}


def test_extractive_summaries_carry_earlier_bullets_and_mark_decisions(counter: TokenCounter) -> None:
    text = run(ExtractiveSummarizer(counter).summarize(SummaryRequest(ENTRIES, 5000))).text

    assert "- carried: lexer rewrite started\n" in text
    assert "older entries omitted" not in text  # the earlier summary's own omission line is not carried
    assert "- Decided: use recursive descent 0 — simpler errors (risk: low)\n" in text


def test_extractive_summaries_fit_every_allotment_the_checkpointer_can_give(counter: TokenCounter) -> None:
    for max_tokens in range(MIN_ALLOTMENT, 60):
        text = run(ExtractiveSummarizer(counter).summarize(SummaryRequest(ENTRIES, max_tokens))).text
        assert counter.count(text) <= max_tokens, (max_tokens, text)


def test_the_default_extractive_checkpoint_succeeds_at_the_smallest_allotment(
    make_workspace: Callable[..., Workspace], make_checkpointer: Callable[..., Checkpointer], counter: TokenCounter
) -> None:
    ws = make_workspace()
    run(seeded(ws, notes=30, decisions=3))
    checkpointer = make_checkpointer(ExtractiveSummarizer(counter))
    step = "Rewriting the tokenizer:"
    while checkpointer.plan(ws, {**ws.hot.doc, "current_step": step}).summary_allotment > MIN_ALLOTMENT + 2:
        step += " plan"  # one token at a time, until the recent window has shrunk to the smallest allotments

    def set_step(draft: Draft) -> None:
        draft.set_hot({**draft.edit_hot(), "current_step": step})

    run(ws.write(set_step))
    assert MIN_ALLOTMENT <= checkpointer.plan(ws, ws.hot.doc).summary_allotment <= MIN_ALLOTMENT + 2

    record = run(checkpointer.run(ws, force=True))

    assert record["tokens_after"] <= BUDGET.checkpoint_target * BUDGET.hot


# --- applying: the record, the log, what an LLM's rejected summary leaves -------------------------------------------


async def set_task(ws: Workspace, task: str) -> None:
    def apply(draft: Draft) -> None:
        draft.set_hot({**draft.edit_hot(), "task": task})

    await ws.write(apply)


def warm_today(ws: Workspace) -> list[tuple[str, dict[str, str]]]:
    return [(e.action, dict(e.details)) for e in ws.warm.entries_for(ws.today())]


def warm_results(ws: Workspace, action: str) -> list[str | None]:
    return [e.result for e in ws.warm.entries_for(ws.today()) if e.action == action]


def test_the_record_and_the_log_line_of_a_checkpoint_say_exactly_what_it_compressed(
    make_workspace: Callable[..., Workspace], make_checkpointer: Callable[..., Checkpointer], counter: TokenCounter
) -> None:
    import hashlib
    import re

    ws = make_workspace()
    run(set_task(ws, "Rewrite the tokenizer"))
    run(seeded(ws))
    before = ws.hot.doc
    summarizer = Canned(tokens_in=120, tokens_out=30)
    checkpointer = make_checkpointer(summarizer)
    plan = checkpointer.plan(ws, before)
    notes = [e.key for e in plan.entries if e.kind == "note"]
    decisions = [e.key for e in plan.entries if e.kind == "decision"]

    record = run(checkpointer.run(ws, force=True))

    after = ws.hot.doc
    assert summarizer.requests[0].task == "Rewrite the tokenizer"
    assert re.fullmatch(r"ckpt-20240315-093000-[0-9a-f]{4}", record["id"])
    assert record["at"] == "2024-03-15T09:30:00+00:00"
    assert (record["tokens_before"], record["tokens_after"]) == (plan.tokens_before, ws.hot.tokens)
    assert record["entries_compressed"] == len(notes) + len(decisions) > 0
    assert record["compressed"] == sorted(notes + decisions)  # no summary before this one
    assert "compressed_by_list" not in record  # every key once (the records of before stop 41 are still read)
    assert record["kept_edited"] == []
    assert record["summary_sha256"] == hashlib.sha256(after["summary"].encode()).hexdigest()
    assert record["flushed_to_warm"] == len(notes) + len(decisions)  # nothing of them was in the warm log yet
    assert (record["pre_commit"], record["post_commit"], record["backend"]) == ("", "", "fake")
    assert (record["llm_tokens_in"], record["llm_tokens_out"]) == (120, 30)
    assert "rejected" not in record
    assert after["checkpoints"][-1] == record
    assert after["summary"].startswith(summarizer.text)
    assert {n["id"] for n in after["notes"]}.isdisjoint(notes)
    assert {d["id"] for d in after["decisions"]}.isdisjoint(decisions)
    logged = [details for action, details in warm_today(ws) if action == "checkpoint"]
    assert logged == [
        {
            "id": record["id"],
            "tokens_before": str(plan.tokens_before),
            "tokens_after": str(ws.hot.tokens),
            "entries_compressed": str(len(notes) + len(decisions)),
            "pre_commit": "(snapshots disabled)",
            "backend": "fake",
        }
    ]
    assert warm_results(ws, "checkpoint") == [f"hot {plan.tokens_before} -> {ws.hot.tokens} tokens"]
    flushed_notes = [d["id"] for a, d in warm_today(ws) if a == "note from hot"]
    assert sorted(flushed_notes) == sorted(notes)


def test_a_decision_logged_before_the_days_parsed_window_is_not_flushed_to_the_warm_log_again(
    make_workspace: Callable[..., Workspace],
    make_checkpointer: Callable[..., Checkpointer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hour soak found `decision: d-...` twice in a day file: decision.record logs each decision to warm, and
    the flush skipped only those it saw among the day's parsed entries, which keep the newest DAY_WINDOW. A
    decision logged before them was flushed again by the checkpoint that compressed it."""
    monkeypatch.setattr(warm_parse, "DAY_WINDOW", 8)
    monkeypatch.setattr(warm_parse, "DAY_WINDOW_SLACK", 4)
    ws = make_workspace()

    async def record(i: int) -> None:
        def apply(draft: Draft) -> None:  # what decision.record does
            doc, _ = hot_format.add_decision(draft.edit_hot(), f"decision {i}", f"reason {i}", None, draft.now)
            draft.set_hot(doc)
            draft.log(f"decision: decision {i}", (("reason", f"reason {i}"),))

        await ws.write(apply)

    async def fill() -> None:
        for i in range(6):
            await record(i)
        await add_notes(ws, [note_text(i) for i in range(40)])
        for i in range(30):  # the decisions' entries fall out of the parsed window
            await ws.write(lambda d, i=i: d.log(f"step {i}", (("n", str(i)),)))

    run(fill())
    ws.warm.entries_for(ws.today())  # parsed, as a read would: the oldest entries are let go
    assert ws.warm.first_kept(ws.today()) > 6

    record_ = run(make_checkpointer().run(ws, force=True))

    assert [k for k in record_["compressed"] if k.startswith("d")]  # decisions were compressed
    text = (ws.root / "warm" / f"{ws.today()}.md").read_text(encoding="utf-8")
    for i in range(6):
        assert text.count(f"decision: decision {i}\n") == 1, (
            f"decision {i} logged {text.count(f'decision: decision {i}')} times"
        )


def test_without_flush_to_warm_nothing_compressed_is_appended_to_the_warm_log(
    make_workspace: Callable[..., Workspace], make_checkpointer: Callable[..., Checkpointer]
) -> None:
    ws = make_workspace()
    run(seeded(ws))

    summarizer = Canned(f"{SUMMARY_HEADING}\n- the lexer now handles the suffix X\n")
    config = CheckpointConfig(min_fact_coverage=0.0, flush_to_warm=False)

    record = run(make_checkpointer(summarizer, config=config).run(ws, True))

    assert summarizer.requests[0].task == ""  # no task set: none sent
    assert ws.hot.doc["summary"] == (  # the summary as written, then memd's fold line, one newline between
        f"{SUMMARY_HEADING}\n- the lexer now handles the suffix X\n"
        f"- (folds in {record['entries_compressed']} entries from 1 checkpoint; pre-state none, snapshots disabled)\n"
    )
    assert record["flushed_to_warm"] == 0
    assert not [a for a, _ in warm_today(ws) if a == "note from hot" or a.startswith("decision: decision")]


@pytest.mark.parametrize(("field", "key"), [("notes", "text"), ("decisions", "reason")])
def test_an_old_entry_edited_while_the_summarizer_works_stays_with_its_new_text_and_is_listed_as_kept_edited(
    make_workspace: Callable[..., Workspace], make_checkpointer: Callable[..., Checkpointer], field: str, key: str
) -> None:
    ws = make_workspace()
    run(seeded(ws))
    first = ws.hot.doc[field][0]

    async def edit_first() -> None:
        def apply(draft: Draft) -> None:
            doc = draft.edit_hot()
            entries = [dict(e, **{key: "corrected while the summary was written"}) if e["id"] == first["id"] else e
                       for e in doc[field]]  # fmt: skip
            draft.set_hot({**doc, field: entries})

        await ws.write(apply)

    record = run(make_checkpointer(Canned(during=edit_first)).run(ws, force=True))

    assert record["kept_edited"] == [first["id"]]
    assert first["id"] not in record["compressed"]
    kept = [e for e in ws.hot.doc[field] if e["id"] == first["id"]]
    assert [e[key] for e in kept] == ["corrected while the summary was written"]


def test_a_summary_edited_by_hand_while_the_summarizer_works_fails_the_checkpoint_and_changes_nothing_else(
    make_workspace: Callable[..., Workspace], make_checkpointer: Callable[..., Checkpointer]
) -> None:
    ws = make_workspace()
    run(seeded(ws))

    async def edit_summary() -> None:
        await ws.write(lambda d: d.set_hot({**d.edit_hot(), "summary": "a person's own summary\n"}))

    before = ws.hot.doc
    checkpointer = make_checkpointer(Canned(during=edit_summary))
    plan = checkpointer.plan(ws, before)
    with pytest.raises(CheckpointFailed) as failed:
        run(checkpointer.run(ws, force=True))

    assert failed.value.message == "the summary was changed while the checkpoint ran; nothing applied"
    assert ws.hot.doc == {**before, "summary": "a person's own summary\n"}
    # What the checkpoint was about to compress went to the warm log first, in a batch of its own: it is there
    # although the apply was refused.
    compressed = [e.key for e in plan.entries if e.kind == "note"]
    assert sorted(d["id"] for a, d in warm_today(ws) if a == "note from hot") == sorted(compressed)


def llm_checkpointer(
    tmp_path: Path, io: ThreadPoolExecutor, counter: TokenCounter, llm: Any, fallback: bool = True
) -> Checkpointer:
    return Checkpointer(
        CheckpointConfig(min_fact_coverage=0.0),
        llm,
        Snapshotter(SnapshotConfig(enabled=False), tmp_path / "state", io),
        1_000_000,
        10.0,
        Monotonic(),
        fallback=ExtractiveSummarizer(counter) if fallback else None,
    )


def test_an_llm_summary_that_fails_its_checks_is_replaced_by_the_extractive_one_and_the_rejection_recorded(
    make_workspace: Callable[..., Workspace],
    tmp_path: Path,
    io: ThreadPoolExecutor,
    counter: TokenCounter,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ws = make_workspace()
    run(set_task(ws, "Rewrite the tokenizer"))
    run(seeded(ws))
    llm = Canned(f"{SUMMARY_HEADING}\nHere is what happened, in prose rather than bullets.\n", name="openai")
    checkpointer = llm_checkpointer(tmp_path, io, counter, llm)
    plan = checkpointer.plan(ws, ws.hot.doc)
    expected_text = run(
        ExtractiveSummarizer(counter).summarize(SummaryRequest(plan.entries, plan.summary_allotment, task="x"))
    ).text
    reason = (
        "the summary breaks the asked-for structure at line 1 ('Here is what happened, in prose rather than "
        "bullets.'): only the headings " + ", ".join(SECTIONS) + " and '- ' bullets are accepted; nothing applied"
    )

    record = run(checkpointer.run(ws, force=True))
    first_summary = ws.hot.doc["summary"]
    run(add_notes(ws, [note_text(i) for i in range(40, 80)]))
    second = run(checkpointer.run(ws, force=True))

    assert record["rejected"] == {"backend": "openai", "reason": reason}
    assert second["rejected"] == record["rejected"]
    assert second["compressed"][-1] == "summary" and "summary" not in record["compressed"]  # the first's, folded in
    assert checkpointer.health["alpha"].rejected == 2
    assert record["backend"] == "extractive"
    assert first_summary.startswith(without_fold_line(expected_text).rstrip("\n") + "\n")
    assert checkpointer.health["alpha"].last_rejection == reason
    assert [r.getMessage() for r in caplog.records if r.name == "memd.checkpoint" and r.levelname == "WARNING"] == [
        f"checkpoint of alpha: LLM summary rejected, extractive applied instead: {reason}"
    ] * 2
    logged = [details for action, details in warm_today(ws) if action == "checkpoint"]
    assert logged[0]["rejected"] == f"openai: {reason}"


def test_an_llm_summary_in_the_asked_for_structure_is_applied_as_written(
    make_workspace: Callable[..., Workspace], tmp_path: Path, io: ThreadPoolExecutor, counter: TokenCounter
) -> None:
    ws = make_workspace()
    run(seeded(ws))
    body = "\n".join([SECTIONS[0], "- the tokenizer splits on '::'"])
    llm = Canned(f"{SUMMARY_HEADING}\n{body}\n", name="openai")

    record = run(llm_checkpointer(tmp_path, io, counter, llm).run(ws, force=True))

    assert record["backend"] == "openai" and "rejected" not in record
    assert ws.hot.doc["summary"].startswith(f"{SUMMARY_HEADING}\n{body}\n")


@pytest.mark.parametrize("name", ["openai", "extractive"])
def test_a_rejected_summary_without_a_fallback_or_from_the_extractive_summarizer_fails_the_checkpoint(
    make_workspace: Callable[..., Workspace], tmp_path: Path, io: ThreadPoolExecutor, counter: TokenCounter, name: str
) -> None:
    ws = make_workspace()
    run(seeded(ws))
    before = ws.hot.doc
    checkpointer = llm_checkpointer(tmp_path, io, counter, Canned("", name=name), fallback=name == "extractive")

    with pytest.raises(CheckpointFailed) as failed:
        run(checkpointer.run(ws, force=True))

    assert failed.value.message == "the summarizer returned an empty summary; nothing applied"
    assert ws.hot.doc == before
    assert checkpointer.health["alpha"].rejected == 0


def test_a_checkpoint_whose_pre_state_cannot_be_committed_is_refused_with_the_snapshot_error(
    make_workspace: Callable[..., Workspace],
    make_checkpointer: Callable[..., Checkpointer],
    git_snapshots: Snapshotter,
) -> None:
    ws = make_workspace()
    run(seeded(ws))
    run(git_snapshots.snapshot(ws, "start"))  # the repository exists; then a merge is left in progress in it
    git_dir = Path(git_snapshots.repo_state(ws).repo.git_dir)  # type: ignore[union-attr]
    (git_dir / "MERGE_HEAD").write_text("0" * 40 + "\n")
    run(add_notes(ws, ["one more note, uncommitted"]))
    before = ws.hot.doc

    with pytest.raises(CheckpointFailed) as failed:
        run(make_checkpointer(snapshots=git_snapshots).run(ws, force=True))

    error = git_snapshots.status_for("alpha")["last_error"]
    assert error.startswith("repo-unsafe: MERGE_HEAD in ")
    assert failed.value.message == (
        "the pre-checkpoint state could not be committed to git, so the checkpoint would not be reversible: " + error
    )
    assert ws.hot.doc == before


@dataclass
class Described(Canned):
    """A summarizer that says which model answered, under which request ids, and what it redacted."""

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.requests.append(request)
        return SummaryResult(
            self.text, self.name, model="m-1", tokens_in=7, tokens_out=3, request_ids=["req-1"], redactions={"aws": 1}
        )


def test_a_checkpoint_with_snapshots_commits_after_itself_with_its_trailers_and_records_both_commits(
    make_workspace: Callable[..., Workspace],
    make_checkpointer: Callable[..., Checkpointer],
    io: ThreadPoolExecutor,
    caplog: pytest.LogCaptureFixture,
    git_snapshots: Snapshotter,
) -> None:
    import subprocess

    caplog.set_level("INFO", logger="memd.checkpoint")
    ws = make_workspace()
    run(seeded(ws))
    checkpointer = make_checkpointer(Described(), snapshots=git_snapshots)
    entries = len(checkpointer.plan(ws, ws.hot.doc).entries)

    record = run(checkpointer.run(ws, force=True))

    repo = git_snapshots.repo_state(ws).repo
    assert repo is not None
    message = subprocess.run(
        ["git", f"--git-dir={repo.git_dir}", "log", "-1", "--format=%B", record["post_commit"]],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert message.startswith("memd: after checkpoint")
    before_message = subprocess.run(
        ["git", f"--git-dir={repo.git_dir}", "log", "-1", "--format=%s", record["pre_commit"]],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert before_message.startswith("memd: before checkpoint")
    assert f"pre-state {record['pre_commit'][:12]})" in ws.hot.doc["summary"]
    assert f"Memd-Checkpoint: {record['id']}" in message.splitlines()
    assert f"Memd-Tokens-Before: {record['tokens_before']}" in message.splitlines()
    assert f"Memd-Tokens-After: {record['tokens_after']}" in message.splitlines()
    assert len(record["pre_commit"]) == len(record["post_commit"]) == 40
    assert record["pre_commit"] != record["post_commit"]
    assert ws.hot.doc["checkpoints"][-1]["post_commit"] == record["post_commit"]
    assert (record["model"], record["request_ids"], record["redactions"]) == ("m-1", ["req-1"], {"aws": 1})
    logged = [d for a, d in warm_today(ws) if a == "checkpoint"]
    assert logged[0]["pre_commit"] == record["pre_commit"]
    assert [r.getMessage() for r in caplog.records if r.name == "memd.checkpoint" and r.levelname == "INFO"] == [
        f"checkpoint {record['id']} of alpha: hot {record['tokens_before']} -> {record['tokens_after']} tokens, "
        f"{entries} entries compressed (fake)"
    ]


def test_hot_keeps_the_newest_ten_checkpoint_records(
    make_workspace: Callable[..., Workspace], make_checkpointer: Callable[..., Checkpointer]
) -> None:
    ws = make_workspace()
    run(seeded(ws))
    older = [{"id": f"ckpt-old-{i}"} for i in range(10)]
    run(ws.write(lambda d: d.set_hot({**d.edit_hot(), "checkpoints": older})))

    record = run(make_checkpointer().run(ws, force=True))

    assert [r["id"] for r in ws.hot.doc["checkpoints"]] == [f"ckpt-old-{i}" for i in range(1, 10)] + [record["id"]]


class SyncedDuringTheCall(Described):
    """A summarizer during whose call a sync lands (`sync`, set by the test)."""

    sync: Callable[[], None] = staticmethod(lambda: None)

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.sync()
        return await super().summarize(request)


@pytest.mark.parametrize(
    ("when", "decisions"),
    [("before", 6), ("before", 0), ("during the call", 0)],
    ids=["before it", "before it, only hot/memd.json compressed", "during the summarizer's call"],
)
def test_a_checkpoint_around_a_sync_commits_this_machines_hot_files_before_and_after_it(
    make_workspace: Callable[..., Workspace],
    make_checkpointer: Callable[..., Checkpointer],
    git_snapshots: Snapshotter,
    when: str,
    decisions: int,
) -> None:
    import os
    import subprocess

    from memd.gitrepo import HOT_FILES

    ws = make_workspace()
    run(seeded(ws, decisions=decisions))
    summarizer = SyncedDuringTheCall()
    checkpointer = make_checkpointer(summarizer, snapshots=git_snapshots)
    run(git_snapshots.snapshot(ws, "this machine's session"))
    state = git_snapshots.repo_state(ws)
    assert state.repo is not None
    env = {**os.environ, "GIT_DIR": str(state.repo.git_dir), "GIT_WORK_TREE": str(ws.root)}
    env |= {
        f"GIT_{who}_{what}": value
        for who in ("AUTHOR", "COMMITTER")
        for what, value in (("NAME", "o"), ("EMAIL", "o@x"))
    }

    def git_bytes(*args: str, stdin: bytes = b"") -> bytes:
        return subprocess.run(["git", *args], input=stdin, capture_output=True, env=env, check=True).stdout

    def git(*args: str, stdin: bytes = b"") -> str:
        return git_bytes(*args, stdin=stdin).decode().strip()

    def another_machines_session_arrives() -> None:
        """A sync fast-forwards to another machine's commit, whose hot files are that machine's session; this
        machine's files stay on disk and are remembered as kept (memd.sync): routine snapshots leave them out."""
        for path in HOT_FILES:
            blob = git("hash-object", "-w", "--stdin", stdin=b'{"other": "machine"}\n')
            git("update-index", "--cacheinfo", f"100644,{blob},{path}")
        git("update-ref", "HEAD", git("commit-tree", git("write-tree"), "-p", "HEAD", "-m", "another machine"))
        state.hot_kept = {path: (ws.root / path).read_bytes() for path in HOT_FILES}

    mine = {path: (ws.root / path).read_bytes() for path in HOT_FILES}
    if when == "before":
        another_machines_session_arrives()
    else:
        summarizer.sync = another_machines_session_arrives

    record = run(checkpointer.run(ws, force=True))

    def session(data: bytes) -> dict[str, Any]:  # a hot file but the record of the post-checkpoint commit itself
        return {k: v for k, v in json.loads(data).items() if k != "checkpoints"}

    for path in HOT_FILES:  # the record's commits stand for this machine's session, before and after
        assert git_bytes("show", f"{record['pre_commit']}:{path}") == mine[path], path
        after = git_bytes("show", f"{record['post_commit']}:{path}")
        assert session(after) == session((ws.root / path).read_bytes()), path


def test_a_checkpoint_parses_a_big_unread_day_in_a_worker_thread_never_on_the_event_loop(
    make_workspace: Callable[..., Workspace],
    make_checkpointer: Callable[..., Checkpointer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The soak seeded with an hour of load stalled every client for ~4 s at start: the first checkpoints' flush
    looked up the day's entries inside the writer's batch, where the never-read 36 MB day was parsed whole on the
    event loop. The day is parsed before the batch, as a read would parse it (WarmStore.load)."""
    day = START.date()
    entries = "".join(
        warm_format.render_entry(warm_format.WarmEntry(f"08:{i // 60 % 60:02d}:{i % 60:02d}", f"earlier work {i}"))
        for i in range(2000)
    )
    warm = make_workspace().root / "warm"
    header = warm_format.day_header(day, warm_format.zone_label(START, "UTC"))
    (warm / warm_format.day_filename(day)).write_text(header + entries, "utf-8")
    assert len(entries) > warm_store.INLINE_PARSE_BYTES * 4
    ws = make_workspace()  # opened on a day file no read has parsed yet
    run(seeded(ws))
    parses: list[tuple[int, int]] = []  # (thread, bytes)
    parse = warm_store.WarmStore._parse

    def spied(self: warm_store.WarmStore, job: warm_parse.Job, whole_if_rewritten: bool) -> warm_parse.Result:
        parses.append((threading.get_ident(), job.bytes))
        return parse(self, job, whole_if_rewritten)

    monkeypatch.setattr(warm_store.WarmStore, "_parse", spied)

    record = run(make_checkpointer().run(ws, force=True))

    assert record["compressed"] and record["flushed_to_warm"] > 0
    loop_thread = threading.get_ident()  # asyncio.run runs the loop on this thread
    assert [n for t, n in parses if t == loop_thread and n > warm_store.INLINE_PARSE_BYTES] == []
    assert any(n > warm_store.INLINE_PARSE_BYTES for _, n in parses)  # the day was parsed, in a worker
