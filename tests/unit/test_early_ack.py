"""Specification of early answers (issue 17): the worker that made a batch durable sends its requests' answers
itself, and only what the loop would have sent: after the fsync returned, never for a batch that failed, and never
with usage figures that publishing the batch does not leave. Everything else is answered by the loop as before."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import pytest
from edits import note
from hooked_io import HookedIO

from memd import protocol
from memd.batch import Draft
from memd.early_ack import EarlyAck, ReplyTo
from memd.errors import StorageError
from memd.tiers import hot_format
from memd.workspace import Workspace


class Outlet:
    """A connection as the worker sees it: records what it was asked to send, from which thread, and whether the
    loop had published the batch by then."""

    def __init__(self, ws: Callable[[], Workspace]) -> None:
        self.ws = ws
        self.sent: list[tuple[Any, bytes, str, int]] = []
        self.accept = True
        self.fails = False

    def encode_answer(self, request_id: Any, result: Any) -> bytes:
        return protocol.encode_result(request_id, result)

    def send_early(self, slot: Any, payload: bytes) -> bool:
        self.sent.append((slot, payload, threading.current_thread().name, self.ws().health.batches))
        if self.fails:
            raise RuntimeError("a bug in the connection's send")
        return self.accept


class GatedIO(HookedIO):
    """Writes start once the loop has finished the turn that submitted them, so the answers it prepares during the
    write are ready; `inline_next`: the next write runs at once, before the loop prepares any answer."""

    def __init__(self) -> None:
        super().__init__()
        self.inline_next = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        if self.inline_next:
            self.inline_next = False
            done: Future[Any] = Future()
            try:
                done.set_result(fn(*args, **kwargs))
            except BaseException as exc:
                done.set_exception(exc)
            return done
        gate = threading.Event()
        asyncio.get_running_loop().call_soon(gate.set)

        def gated(*a: Any, **k: Any) -> Any:
            assert gate.wait(10)
            return fn(*a, **k)

        return super().submit(gated, *args, **kwargs)


@pytest.fixture
def gated_io() -> Iterator[GatedIO]:
    executor = GatedIO()
    yield executor
    executor.shutdown()


def log_entry(action: str) -> Callable[[Draft], Any]:
    def edit(draft: Draft) -> dict[str, Any]:
        entry = draft.log(action, (("cmd", "pytest"),))
        return {"time": entry.time, "action": entry.action}

    return edit


def step(current: str) -> Callable[[Draft], Any]:
    """A progress update: it rewrites hot/context.json, the file a person edits."""

    def edit(draft: Draft) -> list[str]:
        doc, missing = hot_format.update_progress(draft.edit_hot(), current, [], [], [])
        draft.set_hot(doc)
        return missing

    return edit


def with_usage(name: str) -> Callable[[Any, Any], dict[str, Any]]:
    return lambda result, usage: {name: result, "usage": usage}


def answered(payload: bytes) -> Any:
    return json.loads(payload)["result"]


def test_the_worker_sends_exactly_the_answer_the_loop_would_send_before_the_loop_publishes(
    open_alpha: Callable[..., Workspace], gated_io: GatedIO
) -> None:
    outlet = Outlet(lambda: ws)
    ws = open_alpha(gated_io)

    async def go() -> list[tuple[Any, dict[str, Any]]]:
        out = []
        for i in range(3):
            ack = EarlyAck(ReplyTo(outlet, f"slot-{i}", i), with_usage("entry"))
            result = await ws.write(log_entry(f"step {i}"), ack)
            out.append((ack, {"entry": result, "usage": ws.usage_dict()}))
        note_ack = EarlyAck(ReplyTo(outlet, "slot-note", 9), with_usage("note"))
        written = await ws.write(note("a hot note"), note_ack)
        out.append((note_ack, {"note": written, "usage": ws.usage_dict()}))
        return out

    answers = asyncio.run(go())

    assert [slot for slot, *_ in outlet.sent] == ["slot-0", "slot-1", "slot-2", "slot-note"]
    for (ack, loop_answer), (_, payload, thread, published) in zip(answers, outlet.sent, strict=True):
        assert ack.sent
        assert answered(payload) == loop_answer  # the usage after publishing included
        assert thread.startswith("test-io")
        assert published == answers.index((ack, loop_answer))  # sent before the loop took the batch in
    assert ws.health.early_answers == 4
    assert ws.health.early_usage_mismatches == 0


def test_a_batch_whose_fsync_fails_sends_no_answer_and_fails_its_requests(
    open_alpha: Callable[..., Workspace], gated_io: GatedIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    outlet = Outlet(lambda: ws)
    ws = open_alpha(gated_io)
    real_fsync = os.fsync

    def failing_fsync(fd: int) -> None:
        if threading.current_thread().name.startswith("test-io"):
            raise OSError(errno.EIO, "Input/output error")
        real_fsync(fd)

    async def go() -> None:
        ack = EarlyAck(ReplyTo(outlet, "slot", 1), with_usage("entry"))
        monkeypatch.setattr(os, "fsync", failing_fsync)
        with pytest.raises(StorageError):
            await ws.write(log_entry("never acknowledged"), ack)
        monkeypatch.setattr(os, "fsync", real_fsync)
        assert ack.payload is not None  # it was prepared: only the failed fsync kept it from going out
        assert not ack.sent

    asyncio.run(go())

    assert outlet.sent == []
    assert ws.health.write_fault


def test_a_batch_with_a_learning_is_answered_by_the_loop(
    open_alpha: Callable[..., Workspace], gated_io: GatedIO
) -> None:
    outlet = Outlet(lambda: ws)
    ws = open_alpha(gated_io)

    def learn(draft: Draft) -> str:
        return draft.learn("Testing", "cold usage is counted when the batch is published")

    async def go() -> None:
        ack = EarlyAck(ReplyTo(outlet, "slot", 1), with_usage("learning"))
        await ws.write(learn, ack)
        assert ack.payload is None and not ack.sent

    asyncio.run(go())

    assert outlet.sent == []


def test_an_append_by_someone_else_during_the_write_leaves_the_answer_to_the_loop(
    open_alpha: Callable[..., Workspace], gated_io: GatedIO
) -> None:
    outlet = Outlet(lambda: ws)
    ws = open_alpha(gated_io)

    async def go() -> dict[str, Any]:
        await ws.write(log_entry("first"))  # today's file exists and is counted
        day = ws.root / "warm" / f"{ws.today().isoformat()}.md"

        def tool_appends() -> None:
            with day.open("a") as f:
                f.write("- 12:00:00 | a tool appended this line\n")

        gated_io.edits.append(tool_appends)
        ack = EarlyAck(ReplyTo(outlet, "slot", 2), with_usage("entry"))
        await ws.write(log_entry("second"), ack)
        assert ack.payload is not None and not ack.sent  # prepared, but the usage it carries no longer holds
        return ws.usage_dict()

    usage = asyncio.run(go())

    assert outlet.sent == []
    assert ws.health.early_usage_mismatches == 0
    assert usage["warm"]["tokens"] == ws.counter.count((ws.root / "warm" / f"{ws.today().isoformat()}.md").read_text())


@pytest.mark.parametrize("connection", ["refuses", "raises"])
def test_a_send_the_connection_refuses_or_fails_leaves_the_answer_to_the_loop_and_the_writer_goes_on(
    open_alpha: Callable[..., Workspace], gated_io: GatedIO, connection: str
) -> None:
    outlet = Outlet(lambda: ws)
    # refuses: EAGAIN, an earlier answer owed, a closing transport; raises: a bug in the connection's send
    outlet.accept, outlet.fails = False, connection == "raises"
    ws = open_alpha(gated_io)

    async def go() -> list[Any]:
        first = EarlyAck(ReplyTo(outlet, "slot", 1), with_usage("entry"))
        done = [await asyncio.wait_for(ws.write(log_entry("sent by the loop"), first), 10)]
        assert not first.sent
        done.append(await asyncio.wait_for(ws.write(log_entry("and the next one")), 10))  # the writer is free
        return done

    written = asyncio.run(go())

    assert [entry["action"] for entry in written] == ["sent by the loop", "and the next one"]
    assert len(outlet.sent) == 1
    assert ws.health.early_answers == 0


def test_answers_prepared_for_a_plan_a_persons_save_undid_are_never_sent(
    open_alpha: Callable[..., Workspace], gated_io: GatedIO
) -> None:
    outlet = Outlet(lambda: ws)
    ws = open_alpha(gated_io)
    context = ws.root / "hot" / "context.json"

    def person_saves() -> None:
        doc = json.loads(context.read_text())
        doc["task"] = "the person's task"
        tmp = context.with_name("editor.tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, context)
        # The plan made on the person's version is written before the loop could prepare its answer: whatever
        # the worker finds prepared then was prepared for the plan the person's save undid.
        gated_io.inline_next = True

    async def go() -> dict[str, Any]:
        await ws.write(step("first"))
        gated_io.edits.append(person_saves)  # the first plan's publish meets the person's save: planned again
        ack = EarlyAck(ReplyTo(outlet, "slot", 1), with_usage("not_pending"))
        missing = await ws.write(step("second"), ack)
        return {"not_pending": missing, "usage": ws.usage_dict()}

    loop_answer = asyncio.run(go())

    assert ws.health.replans == 1
    assert ws.hot.doc["task"] == "the person's task"
    assert outlet.sent == []
    assert loop_answer["not_pending"] == []
    assert ws.health.early_usage_mismatches == 0


def test_lone_writes_are_answered_by_the_worker_and_batches_of_several_by_the_loop(
    open_alpha: Callable[..., Workspace],
) -> None:
    outlet = Outlet(lambda: ws)
    with GatedIO() as io:
        ws = open_alpha(io)

        async def go() -> tuple[list[tuple[int, dict[str, Any]]], set[int]]:
            lone: list[tuple[int, dict[str, Any]]] = []
            grouped: set[int] = set()
            for i in range(40):
                edit = note(f"note {i}") if i % 3 == 0 else log_entry(f"entry {i} " * (i % 7 + 1))
                name = "note" if i % 3 == 0 else "entry"
                ack = EarlyAck(ReplyTo(outlet, i, i), with_usage(name))
                if i % 10 < 5:  # one at a time: a batch of one
                    result = await ws.write(edit, ack)
                    lone.append((i, {name: result, "usage": ws.usage_dict()}))
                else:  # five at once: one batch of several (under load: the loop answers them)
                    grouped.add(i)
                    others = [ws.write(log_entry(f"with {i}.{k}")) for k in range(4)]
                    await asyncio.gather(ws.write(edit, ack), *others)
            return lone, grouped

        lone, grouped = asyncio.run(go())

    sent = {slot: answered(payload) for slot, payload, _, _ in outlet.sent}
    assert not grouped & set(sent)
    assert ws.health.early_usage_mismatches == 0
    assert set(sent) == {i for i, _ in lone}
    for i, loop_answer in lone:  # hot and warm mixed: the usage each carried is what publishing left
        assert sent[i] == loop_answer
