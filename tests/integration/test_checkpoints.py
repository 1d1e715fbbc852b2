"""Checkpoints of a real daemon (contracts 3, 4 and 7): the daemon's real `openai` client talks real HTTP to a
scripted OpenAI-compatible server (tests/fakellm.py) on loopback.

Two daemons serve most of the module: `memd_llm` (an endpoint that answers well unless a test scripts it
otherwise) and `memd_flaky` (short timeouts and deadline, for the failure matrix). Each test writes into a
workspace of its own, and finds its own requests on the shared fake server by the workspace's tag in their bodies.
Tests that need another [llm] or [checkpoint] section start a daemon of their own. Waits are bounded polls.
"""

from __future__ import annotations

import json
import math
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from expected import recent_window
from fakellm import Behaviour, Delay, Empty, FakeLLM, Hang, Malformed, Reply, Status, closed_port_url
from harness import RunningDaemon, base_config, module_daemon, wait_for
from hot_files import hot_from_git, read_hot
from secrets_corpus import SECRET_CORPUS

from memd.checkpoint_plan import without_fold_line
from memd.errors import MemdError
from memd.tokens import TokenCounter

KEY_ENV = "MEMD_TEST_LLM_KEY"
KEY_ENV_VALUE = {KEY_ENV: "sk-test-not-a-secret"}
# The scripted summaries here are not faithful to the notes' identifiers and numbers: these daemons test transport,
# failures and applying, so the coverage check (tests/integration/test_knowledge.py tests it) is off.
NO_COVERAGE = {"min_fact_coverage": 0.0}
GOOD_SUMMARY = "# Context Summary\n- Parser port so far: tokenizer split on '::', lexer tests green.\n"
WAIT = 30.0
KEEP_DECISIONS = 3
RECENT_SHARE = 0.2
SECRETS_HOT = 40000  # the secrets corpus alone is ~14k tokens: room for it and a filler bigger than the recent window

CROSSING_BUDGET = {"hot": 2000, "warm": 4000, "cold": 2000, "model_window": 20000}
ROOMY_BUDGET = {"hot": 6000}  # forced checkpoints only: 80% of it is never reached


# --- helpers -------------------------------------------------------------------------------------------------------


def llm_section(url: str, **overrides: Any) -> dict[str, Any]:
    return {"backend": "openai", "base_url": url, "model": "test", "api_key_env": KEY_ENV, **overrides}


def note_text(tag: str, i: int) -> str:
    return (
        f"[{tag}] note {i}: read parser/tokenize.py around line {i * 7}; the tokenizer splits on '::' and keeps "
        f"trailing whitespace, lexer test {i} passes, follow-up in parser/ast.py"
    )


@dataclass
class Seeded:
    """What a workspace holds after `seed`, as the daemon acknowledged it."""

    task: str
    step: str
    files: list[str]
    pending: list[str]
    decisions: list[dict[str, Any]]
    notes: list[dict[str, Any]]


def seed(daemon: RunningDaemon, ws: str, notes: int = 40, decisions: int = 5) -> Seeded:
    """Task, step, files, pending actions, decisions, notes and a learning, through the protocol."""
    with daemon.client() as c:
        task = f"Port the parser to the new AST ({ws})"
        c.call("session.start", workspace=ws, task=task)
        files, pending = ["parser/tokenize.py", "parser/ast.py"], ["Run the lexer tests", "Update docs/parser.md"]
        step = "Rewriting the tokenizer"
        c.call("progress.update", workspace=ws, step=step, files=files, pending_add=pending)
        made = [
            c.call("decision.record", workspace=ws, action=f"[{ws}] decision {i}", reason=f"reason {i}", risk="low")[
                "decision"
            ]
            for i in range(decisions)
        ]
        written = [c.call("hot.note", workspace=ws, text=note_text(ws, i))["note"] for i in range(notes)]
        c.call("cold.learn", workspace=ws, category="Parser", learning=f"[{ws}] the tokenizer is whitespace-sensitive")
    return Seeded(task, step, files, pending, made, written)


def tier_files(root: Path) -> dict[str, bytes]:
    """Every tier file of a workspace (hot/context.json, hot/memd.json, cold/MEMORY.md, warm/*.md) with its bytes."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for tier in ("hot", "warm", "cold")
        for p in sorted((root / tier).rglob("*"))
        if p.is_file()
    }


def requests_of(fake: FakeLLM, ws: str) -> list[dict[str, Any]]:
    """The chat requests that carried this workspace's entries (every entry text names its workspace)."""
    return [r for r in fake.chat_requests if f"[{ws}]" in r["raw"]]


def checkpoint_status(daemon: RunningDaemon, ws: str) -> dict[str, Any]:
    status: dict[str, Any] = daemon.call("status")["workspaces"][ws]["checkpoint"]
    return status


def error_of(daemon: RunningDaemon, method: str, **params: Any) -> MemdError:
    with pytest.raises(MemdError) as caught:
        daemon.call(method, **params)
    return caught.value


def git(workspace: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(workspace), *args], capture_output=True, timeout=30, check=False)


# --- fixtures ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter.for_encoding("cl100k_base")


@pytest.fixture(scope="module")
def fake_ok() -> Iterator[FakeLLM]:
    with FakeLLM() as fake:
        fake.default = Reply(GOOD_SUMMARY)
        yield fake


@pytest.fixture(scope="module")
def memd_llm(fake_ok: FakeLLM) -> Iterator[RunningDaemon]:
    """A daemon whose LLM answers (after a scripted delay at most); generous per-attempt timeout and deadline."""
    with tempfile.TemporaryDirectory(prefix="memd-") as d:
        root = Path(d) / "ok"
        names = ["crossing", "slow", "restorable", "secrets", "idle", "handedit"]
        config = base_config(
            root,
            workspaces={n: root / "ws" / n for n in names},
            llm=llm_section(fake_ok.url, timeout_seconds=10, max_retries=1, deadline_seconds=20),
            checkpoint={
                "keep_decisions": KEEP_DECISIONS,
                "recent_share": RECENT_SHARE,
                "backoff_seconds": 0.1,
                **NO_COVERAGE,
            },
        )
        for n in names:
            config["workspaces"][n]["budget"] = dict(ROOMY_BUDGET)
        config["workspaces"]["crossing"]["budget"] = dict(CROSSING_BUDGET)
        # The corpus is large: a threshold of 1.0 keeps automatic checkpoints out of the way of the forced one.
        config["workspaces"]["secrets"]["budget"] = {"hot": SECRETS_HOT, "checkpoint_threshold": 1.0}
        daemon = module_daemon(root, config, env=KEY_ENV_VALUE)
        try:
            yield daemon.start()
        finally:
            daemon.kill()


FAILURES: dict[str, tuple[Behaviour, str]] = {
    # workspace (and test id): the endpoint's behaviour on every request, and what the error must say
    "http-500": (Status(500), "HTTP 500"),
    "http-429": (Status(429, headers={"Retry-After": "1"}), "HTTP 429"),
    "hang": (Hang(), "deadline|timed out"),
    "malformed-json": (Malformed(), "JSON"),
}
# Replies that arrive but cannot be applied: the extractive summary is applied instead, the rejection is recorded.
BAD_SUMMARIES: dict[str, tuple[Behaviour, str]] = {
    "empty-content": (Empty(), "empty"),
    "over-budget": (Reply("# Context Summary\n" + "- one more detail worth keeping\n" * 3000), "allotment"),
    "refusal": (Reply("I'm sorry, I can't help with that."), "refusal"),
}


@pytest.fixture(scope="module")
def fake_flaky() -> Iterator[FakeLLM]:
    with FakeLLM() as fake:
        fake.default = Reply(GOOD_SUMMARY)
        yield fake


@pytest.fixture(scope="module")
def memd_flaky(fake_flaky: FakeLLM) -> Iterator[RunningDaemon]:
    """The failure-matrix daemon: one retry, 1 s per attempt, 3 s overall, a short backoff."""
    with tempfile.TemporaryDirectory(prefix="memd-") as d:
        root = Path(d) / "flaky"
        names = ["warmup", "retry-429", *FAILURES, *BAD_SUMMARIES]
        config = base_config(
            root,
            workspaces={n: root / "ws" / n for n in names},
            llm=llm_section(fake_flaky.url, max_retries=1, timeout_seconds=1, deadline_seconds=3),
            checkpoint={"backoff_seconds": 0.1, "backoff_max_seconds": 1, **NO_COVERAGE},
        )
        for n in names:
            config["workspaces"][n]["budget"] = dict(ROOMY_BUDGET)
        daemon = module_daemon(root, config, env=KEY_ENV_VALUE)
        try:
            daemon.start()
            # The daemon imports `openai` on its first checkpoint; pay that once here, not inside a 3 s deadline.
            seed(daemon, "warmup", notes=30, decisions=4)
            daemon.call("checkpoint.run", workspace="warmup")
            yield daemon
        finally:
            daemon.kill()


# --- a threshold crossing ------------------------------------------------------------------------------------------


@dataclass
class Crossing:
    seeded: Seeded
    crossing_write: dict[str, Any]
    record: dict[str, Any]
    after: dict[str, Any]
    usage_after: dict[str, Any]


@pytest.fixture(scope="module")
def crossing(memd_llm: RunningDaemon, fake_ok: FakeLLM) -> Crossing:
    """Notes written until hot passes 80% of its budget, then nothing: the daemon checkpoints by itself."""
    ws = "crossing"
    budget = CROSSING_BUDGET["hot"]
    seeded = seed(memd_llm, ws, notes=0, decisions=6)
    crossing_write: dict[str, Any] = {}
    with memd_llm.client() as c:
        for i in range(500):
            result = c.call("hot.note", workspace=ws, text=note_text(ws, i))
            seeded.notes.append(result["note"])
            if result["usage"]["hot"]["tokens"] >= 0.8 * budget:
                crossing_write = result
                break
    assert crossing_write, "hot never reached 80% of its budget"

    def settled() -> dict[str, Any] | None:
        listed = memd_llm.call("checkpoint.list", workspace=ws)
        done = listed["checkpoints"] and listed["checkpoints"][-1]["post_commit"] and not listed["status"]["in_flight"]
        return listed if done else None

    listed = wait_for(settled, "the automatic checkpoint to be recorded and committed", timeout=WAIT)
    after = memd_llm.call("hot.get", workspace=ws)
    usage_after = memd_llm.call("warm.log", workspace=ws, action="looked at usage")["usage"]  # leaves hot alone
    return Crossing(seeded, crossing_write, listed["checkpoints"][-1], after, usage_after)


def test_the_write_that_crosses_the_threshold_is_acknowledged_normally_with_its_usage(crossing: Crossing) -> None:
    hot = crossing.crossing_write["usage"]["hot"]

    assert hot["tokens"] >= 0.8 * hot["budget"]
    assert hot["percent"] >= 80.0
    assert crossing.crossing_write["note"] == crossing.seeded.notes[-1]


def test_a_threshold_crossing_triggers_exactly_one_checkpoint_that_meets_the_target(
    memd_llm: RunningDaemon, fake_ok: FakeLLM, crossing: Crossing
) -> None:
    target = 0.5 * CROSSING_BUDGET["hot"]
    listed = memd_llm.call("checkpoint.list", workspace="crossing")

    assert len(listed["checkpoints"]) == 1
    assert crossing.after["hot"]["checkpoints"] == listed["checkpoints"]
    assert listed["status"]["runs"] == 1 and listed["status"]["consecutive_failures"] == 0
    assert len(requests_of(fake_ok, "crossing")) == 1
    record = crossing.record
    assert record["backend"] == "openai" and record["model"] == "test"
    assert record["tokens_before"] >= 0.8 * CROSSING_BUDGET["hot"]
    assert record["tokens_after"] <= target
    assert crossing.usage_after["hot"]["tokens"] <= target
    assert crossing.usage_after["hot"]["tokens"] == crossing.after["usage"]["hot"]["tokens"]
    assert without_fold_line(crossing.after["hot"]["summary"]) == GOOD_SUMMARY


def test_pinned_parts_are_byte_identical_after_a_checkpoint(crossing: Crossing, counter: TokenCounter) -> None:
    before, after = crossing.seeded, crossing.after["hot"]
    recent = recent_window(counter, before.notes, RECENT_SHARE * CROSSING_BUDGET["hot"])

    assert after["task"] == before.task
    assert after["current_step"] == before.step
    assert after["files_modified"] == before.files
    assert after["pending_actions"] == before.pending
    assert json.dumps(after["decisions"], sort_keys=True) == json.dumps(
        before.decisions[-KEEP_DECISIONS:], sort_keys=True
    )
    assert 0 < len(recent) < len(before.notes)
    assert json.dumps(after["notes"], sort_keys=True) == json.dumps(recent, sort_keys=True)


def test_exactly_the_older_notes_and_decisions_are_compressed(crossing: Crossing, counter: TokenCounter) -> None:
    before = crossing.seeded
    recent = recent_window(counter, before.notes, RECENT_SHARE * CROSSING_BUDGET["hot"])
    older = before.decisions[:-KEEP_DECISIONS] + before.notes[: len(before.notes) - len(recent)]

    assert crossing.record["compressed"] == sorted(e["id"] for e in older)
    assert crossing.record["entries_compressed"] == len(older)


def test_the_pre_state_is_committed_and_named_by_the_record(memd_llm: RunningDaemon, crossing: Crossing) -> None:
    pre = crossing.record["pre_commit"]
    workspace = memd_llm.workspace("crossing")

    assert git(workspace, "cat-file", "-e", f"{pre}^{{commit}}").returncode == 0
    commits = {c["rev"]: c for c in memd_llm.call("history.list", workspace="crossing", limit=100)["commits"]}
    assert commits[pre]["reason"] == "before checkpoint"
    post = commits[crossing.record["post_commit"]]
    assert post["reason"] == "after checkpoint"
    assert post["trailers"]["Memd-Checkpoint"] == crossing.record["id"]
    state = hot_from_git(  # both hot files as committed: the session's fields and memd's own (notes, summary)
        {
            path: memd_llm.call("history.show", workspace="crossing", rev=pre, path=path)["content"].encode()
            for path in ("hot/context.json", "hot/memd.json")
        }
    )
    assert state["notes"] == crossing.seeded.notes  # the exact state the crossing write left
    assert state["decisions"] == crossing.seeded.decisions
    assert state.get("summary", "") == ""


def test_checkpoint_show_returns_the_original_entries_beside_the_summary(
    memd_llm: RunningDaemon, crossing: Crossing
) -> None:
    shown = memd_llm.call("checkpoint.show", workspace="crossing", id=crossing.record["id"])
    compressed = set(crossing.record["compressed"])
    originals = {e["id"]: e for e in shown["original_entries"]}
    written = {e["id"]: e for e in crossing.seeded.notes + crossing.seeded.decisions if e["id"] in compressed}

    assert shown["record"] == crossing.record
    assert without_fold_line(shown["summary"]) == GOOD_SUMMARY
    assert set(originals) == compressed
    for key, entry in written.items():
        kind = "note" if "text" in entry else "decision"
        assert originals[key] == {"kind": kind, **entry}
    assert crossing.record["pre_commit"] in shown["undo"]


# --- undo ----------------------------------------------------------------------------------------------------------


def test_restoring_the_pre_commit_brings_every_original_note_back_as_a_new_commit(memd_llm: RunningDaemon) -> None:
    ws = "restorable"
    seeded = seed(memd_llm, ws, notes=50)
    record = memd_llm.call("checkpoint.run", workspace=ws)["checkpoint"]
    assert len(memd_llm.call("hot.get", workspace=ws)["hot"]["notes"]) < len(seeded.notes)

    restored = memd_llm.call("snapshot.restore", workspace=ws, rev=record["pre_commit"])

    hot = memd_llm.call("hot.get", workspace=ws)["hot"]
    assert hot["notes"] == seeded.notes
    assert hot["decisions"] == seeded.decisions
    assert restored["rev"] == record["pre_commit"]
    assert "hot/context.json" in restored["changed"]
    head = memd_llm.call("history.list", workspace=ws, limit=1)["commits"][0]
    assert head["rev"] == restored["after"] != record["pre_commit"]
    assert head["trailers"]["Memd-Restored-From"] == record["pre_commit"]


# --- the LLM is not on the write path --------------------------------------------------------------------------------


def test_writes_during_a_slow_llm_call_are_kept_and_the_compressed_entries_are_gone(
    memd_llm: RunningDaemon, fake_ok: FakeLLM
) -> None:
    ws = "slow"
    seeded = seed(memd_llm, ws, notes=50)
    fake_ok.script(Delay(2.0, then=Reply(GOOD_SUMMARY)))
    outcome: dict[str, Any] = {}

    def run_checkpoint() -> None:
        try:
            outcome["result"] = memd_llm.call("checkpoint.run", workspace=ws)
        except Exception as exc:  # reported by the assertions below, not as a thread failure
            outcome["error"] = exc

    runner = threading.Thread(target=run_checkpoint)
    runner.start()
    try:
        wait_for(lambda: requests_of(fake_ok, ws), "the summary request to reach the endpoint", timeout=WAIT)
        with memd_llm.client() as c:
            late = [c.call("hot.note", workspace=ws, text=f"late note {i}")["note"] for i in range(100)]
    finally:
        runner.join(timeout=WAIT)
    assert not runner.is_alive()

    assert "error" not in outcome, outcome.get("error")
    record = outcome["result"]["checkpoint"]
    hot = memd_llm.call("hot.get", workspace=ws)["hot"]
    late_ids = {n["id"] for n in late}
    assert [n for n in hot["notes"] if n["id"] in late_ids] == late
    present = {e["id"] for e in hot["notes"] + hot["decisions"]}
    compressed = set(record["compressed"])
    assert compressed and not compressed & present
    assert compressed == {e["id"] for e in seeded.notes + seeded.decisions} - present


def test_a_hand_edit_during_a_slow_llm_call_that_would_unpin_recent_decisions_is_refused_and_kept(
    memd_llm: RunningDaemon, fake_ok: FakeLLM
) -> None:
    # Five decisions, three pinned: the plan compresses decisions 0 and 1. During the call a person deletes
    # decisions 2-4 by hand; removing the compressed ones would then leave no recent decision at all.
    ws = "handedit"
    seed(memd_llm, ws, notes=50, decisions=5)
    path = memd_llm.workspace(ws) / "hot" / "context.json"
    fake_ok.script(Delay(2.0, then=Reply(GOOD_SUMMARY)))
    outcome: dict[str, Any] = {}

    def run_checkpoint() -> None:
        try:
            outcome["result"] = memd_llm.call("checkpoint.run", workspace=ws)
        except MemdError as exc:
            outcome["error"] = exc

    runner = threading.Thread(target=run_checkpoint)
    runner.start()
    try:
        wait_for(lambda: requests_of(fake_ok, ws), "the summary request to reach the endpoint", timeout=WAIT)
        doc = json.loads(path.read_bytes())
        doc["decisions"] = doc["decisions"][:2]
        path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        edited = path.read_bytes()
    finally:
        runner.join(timeout=WAIT)
    assert not runner.is_alive()

    assert "result" not in outcome, f"the checkpoint applied over the hand edit: {outcome.get('result')}"
    assert "pinned context" in outcome["error"].message
    assert path.read_bytes() == edited
    assert checkpoint_status(memd_llm, ws)["last_error"] == outcome["error"].message


# --- failures change nothing -----------------------------------------------------------------------------------------


def assert_failure_changed_nothing(
    daemon: RunningDaemon, ws: str, attempt: Callable[[], None], expected: str
) -> MemdError:
    """Run a checkpoint attempt that must fail; the files must be as they were and status must say why."""
    root = daemon.workspace(ws)
    before = tier_files(root)
    with pytest.raises(MemdError) as caught:
        attempt()
    assert any(word.lower() in caught.value.message.lower() for word in expected.split("|")), caught.value.message
    assert tier_files(root) == before
    status = checkpoint_status(daemon, ws)
    assert status["consecutive_failures"] == 1
    assert status["last_error"] == caught.value.message
    assert daemon.call("checkpoint.list", workspace=ws)["checkpoints"] == []
    return caught.value


def assert_a_later_good_reply_succeeds(daemon: RunningDaemon, ws: str) -> None:
    record = daemon.call("checkpoint.run", workspace=ws)["checkpoint"]
    assert without_fold_line(daemon.call("hot.get", workspace=ws)["hot"]["summary"]) == GOOD_SUMMARY
    assert [r["id"] for r in daemon.call("checkpoint.list", workspace=ws)["checkpoints"]] == [record["id"]]
    status = checkpoint_status(daemon, ws)
    assert status["consecutive_failures"] == 0 and status["last_error"] is None


@pytest.mark.parametrize("ws", list(FAILURES))
def test_a_failing_endpoint_or_a_bad_summary_changes_nothing_shows_in_status_and_a_later_reply_succeeds(
    memd_flaky: RunningDaemon, fake_flaky: FakeLLM, ws: str
) -> None:
    behaviour, expected = FAILURES[ws]
    seed(memd_flaky, ws)
    fake_flaky.default = behaviour
    try:
        assert_failure_changed_nothing(
            memd_flaky, ws, lambda: memd_flaky.call("checkpoint.run", workspace=ws), expected
        )
    finally:
        fake_flaky.default = Reply(GOOD_SUMMARY)
    assert requests_of(fake_flaky, ws), "the endpoint was never asked"

    assert_a_later_good_reply_succeeds(memd_flaky, ws)


@pytest.mark.parametrize("ws", list(BAD_SUMMARIES))
def test_a_summary_that_cannot_be_applied_is_replaced_by_the_extractive_one_and_the_rejection_shows(
    memd_flaky: RunningDaemon, fake_flaky: FakeLLM, ws: str
) -> None:
    behaviour, expected = BAD_SUMMARIES[ws]
    seeded = seed(memd_flaky, ws)
    fake_flaky.default = behaviour
    try:
        record = memd_flaky.call("checkpoint.run", workspace=ws)["checkpoint"]
    finally:
        fake_flaky.default = Reply(GOOD_SUMMARY)

    assert requests_of(fake_flaky, ws), "the endpoint was asked first"
    assert record["backend"] == "extractive"
    assert record["rejected"]["backend"] == "openai" and expected in record["rejected"]["reason"].lower()
    hot = memd_flaky.call("hot.get", workspace=ws)["hot"]
    assert hot["task"] == seeded.task and hot["pending_actions"] == seeded.pending
    status = checkpoint_status(memd_flaky, ws)
    assert status["consecutive_failures"] == 0 and status["llm_summaries_rejected"] >= 1
    assert expected in (status["last_rejection"] or "").lower()


def test_a_refused_connection_changes_nothing_and_a_reachable_endpoint_after_reload_succeeds(
    make_daemon: Callable[..., RunningDaemon], short_root: Path
) -> None:
    root = short_root / "refused"
    config = base_config(
        root,
        workspaces={"alpha": root / "ws" / "alpha"},
        llm=llm_section(closed_port_url(), max_retries=1, timeout_seconds=1, deadline_seconds=3),
        checkpoint={"backoff_seconds": 0.1, "backoff_max_seconds": 1, **NO_COVERAGE},
    )
    config["workspaces"]["alpha"]["budget"] = dict(ROOMY_BUDGET)
    daemon = make_daemon("refused", config=config, env=KEY_ENV_VALUE)
    seed(daemon, "alpha")

    assert_failure_changed_nothing(
        daemon, "alpha", lambda: daemon.call("checkpoint.run", workspace="alpha"), "cannot reach"
    )

    with FakeLLM() as fake:
        fake.default = Reply(GOOD_SUMMARY)
        config["llm"]["base_url"] = fake.url
        daemon.rewrite_config(config)
        assert daemon.call("config.reload")["reloaded"] is True
        assert_a_later_good_reply_succeeds(daemon, "alpha")
        assert len(fake.chat_requests) == 1


def test_429_with_retry_after_then_a_reply_succeeds_through_the_clients_retry(
    memd_flaky: RunningDaemon, fake_flaky: FakeLLM
) -> None:
    ws = "retry-429"
    seed(memd_flaky, ws)
    fake_flaky.script(Status(429, headers={"Retry-After": "1"}), Reply(GOOD_SUMMARY))

    record = memd_flaky.call("checkpoint.run", workspace=ws)["checkpoint"]

    assert record["backend"] == "openai"
    assert without_fold_line(memd_flaky.call("hot.get", workspace=ws)["hot"]["summary"]) == GOOD_SUMMARY
    assert len(requests_of(fake_flaky, ws)) == 2
    assert checkpoint_status(memd_flaky, ws)["consecutive_failures"] == 0


# --- no loops, no runaway spend ------------------------------------------------------------------------------------


def test_backoff_keeps_automatic_checkpoints_from_hammering_a_failing_endpoint(
    make_daemon: Callable[..., RunningDaemon], short_root: Path
) -> None:
    backoff = 1.0
    with FakeLLM() as fake:
        fake.default = Status(500)
        root = short_root / "backoff"
        config = base_config(
            root,
            workspaces={"alpha": root / "ws" / "alpha"},
            llm=llm_section(fake.url, max_retries=0, timeout_seconds=5, deadline_seconds=10),
            checkpoint={"backoff_seconds": backoff, "backoff_max_seconds": 60, **NO_COVERAGE},
            budget=CROSSING_BUDGET,
        )
        daemon = make_daemon("backoff", config=config, env=KEY_ENV_VALUE)
        writes = 0
        with daemon.client() as c:
            hot: dict[str, Any] = {}
            while not hot or hot["tokens"] < 0.8 * hot["budget"]:
                hot = c.call("hot.note", workspace="alpha", text=note_text("alpha", writes))["usage"]["hot"]
                writes += 1
            wait_for(lambda: fake.chat_requests, "the first automatic checkpoint to ask the endpoint", timeout=WAIT)
            started = time.monotonic()
            for i in range(40):  # every one of these writes is over the threshold and asks for a checkpoint
                c.call("hot.note", workspace="alpha", text=f"over the threshold {i}")
                writes += 1
                time.sleep(0.1)
            elapsed = time.monotonic() - started
        wait_for(
            lambda: not checkpoint_status(daemon, "alpha")["in_flight"], "the last attempt to finish", timeout=WAIT
        )

        attempts = len(fake.chat_requests)  # max_retries = 0: one request per attempt
        # Attempts wait 1, 2, 4, ... seconds after each failure: at most 1 + log2(1 + elapsed/backoff) + 1.
        assert 1 <= attempts <= 2 + math.log2(1 + elapsed / backoff)
        assert attempts * 5 < writes
        status = checkpoint_status(daemon, "alpha")
        assert status["consecutive_failures"] == attempts
        assert "HTTP 500" in status["last_error"]
        assert daemon.call("checkpoint.list", workspace="alpha")["checkpoints"] == []


def test_the_daily_token_cap_stops_a_checkpoint_before_any_request(
    make_daemon: Callable[..., RunningDaemon], short_root: Path
) -> None:
    with FakeLLM() as fake:
        root = short_root / "capped"
        config = base_config(
            root,
            workspaces={"alpha": root / "ws" / "alpha"},
            llm=llm_section(fake.url, max_tokens_per_day=50),
            checkpoint=NO_COVERAGE,
        )
        config["workspaces"]["alpha"]["budget"] = dict(ROOMY_BUDGET)
        daemon = make_daemon("capped", config=config, env=KEY_ENV_VALUE)
        seed(daemon, "alpha")

        error = assert_failure_changed_nothing(
            daemon, "alpha", lambda: daemon.call("checkpoint.run", workspace="alpha"), "daily"
        )

        assert "max_tokens_per_day" in error.message
        assert fake.requests == []


# --- secrets stay home ---------------------------------------------------------------------------------------------


def test_no_secret_from_the_corpus_reaches_the_endpoint_yet_the_files_keep_them(
    memd_llm: RunningDaemon, fake_ok: FakeLLM, counter: TokenCounter
) -> None:
    ws = "secrets"
    with memd_llm.client() as c:
        written = [c.call("hot.note", workspace=ws, text=f"[{ws}] {text}")["note"] for _, _, text in SECRET_CORPUS]
        # One newest note bigger than the recent window: every corpus note is old enough to be compressed.
        filler = f"[{ws}] filler " + "plain words " * int(RECENT_SHARE * SECRETS_HOT)
        c.call("hot.note", workspace=ws, text=filler)
    on_disk = read_hot(memd_llm.workspace(ws))
    assert [n["text"] for n in on_disk["notes"][: len(written)]] == [n["text"] for n in written]

    record = memd_llm.call("checkpoint.run", workspace=ws)["checkpoint"]

    assert {n["id"] for n in written} <= set(record["compressed"])
    sent = requests_of(fake_ok, ws)
    assert len(sent) == 1
    wire = json.dumps(fake_ok.requests)
    contents = "\n".join(m["content"] for r in sent for m in r["body"]["messages"])
    for kind, secret, _ in SECRET_CORPUS:
        assert secret not in wire, kind
        assert secret not in contents, kind
        assert secret not in sent[0]["raw"], kind
    assert contents.count("[REDACTED:") == len(SECRET_CORPUS)
    expected = dict(Counter(kind for kind, _, _ in SECRET_CORPUS))
    assert record["redactions"] == expected
    assert checkpoint_status(memd_llm, ws)["redactions"] == expected
    # Redaction is for the wire only: the pre-state commit holds every note as it was written.
    shown = memd_llm.call("checkpoint.show", workspace=ws, id=record["id"])
    kept = {e["id"]: e["text"] for e in shown["original_entries"]}
    for note, (kind, secret, _) in zip(written, SECRET_CORPUS, strict=True):
        assert secret in kept[note["id"]], kind


# --- the built-in summarizer and refusals to start -------------------------------------------------------------------


def test_the_extractive_default_checkpoints_with_no_llm_configured(
    make_daemon: Callable[..., RunningDaemon], short_root: Path
) -> None:
    root = short_root / "extractive"
    config = base_config(root, workspaces={"alpha": root / "ws" / "alpha"})
    config["workspaces"]["alpha"]["budget"] = dict(ROOMY_BUDGET)
    daemon = make_daemon("extractive", config=config)
    seeded = seed(daemon, "alpha", notes=50)

    record = daemon.call("checkpoint.run", workspace="alpha")["checkpoint"]

    hot = daemon.call("hot.get", workspace="alpha")["hot"]
    assert record["backend"] == "extractive" and record["model"] == ""
    assert record["llm_tokens_in"] == record["llm_tokens_out"] == 0
    assert hot["summary"].startswith("# Context Summary\n")
    assert hot["summary"].rstrip("\n").splitlines()[-1].startswith("- (folds in ")
    assert seeded.decisions[0]["action"] in hot["summary"]  # an older decision, as a bullet
    assert record["tokens_after"] <= 0.5 * ROOMY_BUDGET["hot"]
    assert record["pre_commit"] and record["post_commit"]


def test_checkpoint_run_with_nothing_old_enough_to_compress_fails_clearly_and_changes_nothing(
    memd_llm: RunningDaemon, fake_ok: FakeLLM
) -> None:
    ws = "idle"
    seed(memd_llm, ws, notes=3, decisions=KEEP_DECISIONS)
    before = tier_files(memd_llm.workspace(ws))

    with pytest.raises(MemdError, match="nothing in 'idle' is old enough"):
        memd_llm.call("checkpoint.run", workspace=ws)

    assert tier_files(memd_llm.workspace(ws)) == before
    assert requests_of(fake_ok, ws) == []
    # A forced run with nothing to compress is not a failure: it starts no backoff for the automatic ones.
    assert checkpoint_status(memd_llm, ws)["consecutive_failures"] == 0
