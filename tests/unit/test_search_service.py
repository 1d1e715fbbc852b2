"""Specification of search as the daemon runs it (memd.search.service, memd.handlers.search): the registry listener
only marks, a query catches up first (so it sees every acknowledged write), the background pass follows, access
holds per hit, and `context.get` ranks learnings with the index or, without one, by substring.

Workspaces are real (memd.workspace.Workspace on a temporary directory, writes made durable on worker threads);
the services are a small stand-in holding what the handlers read.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from clocks import START, FixedClock

from memd import protocol
from memd.batch import Draft
from memd.changes import Fanout
from memd.config import SearchConfig, WorkspaceConfig
from memd.early_ack import ReplyTo
from memd.errors import AccessDenied, InvalidParams, Unavailable
from memd.handlers import dispatch
from memd.handlers.access import Call, Peer
from memd.search.searcher import Searcher
from memd.search.service import SearchService
from memd.tokens import TokenCounter
from memd.workspace import Workspace

MEMD_UID, READER, STRANGER = 990, 1002, 1003
SLOW = SearchConfig(index_delay_seconds=60.0)  # the background pass never runs within a test: queries catch up


@dataclass
class Services:
    spaces: dict[str, Workspace]
    search: SearchService
    own_uid: int = MEMD_UID
    refusals: dict[str, str] = field(default_factory=dict)

    def workspaces(self) -> Mapping[str, Workspace]:
        return self.spaces

    def refused(self) -> Mapping[str, str]:
        return self.refusals


@pytest.fixture
def make_workspace(tmp_path: Path, counter: TokenCounter, io: ThreadPoolExecutor) -> Callable[..., Workspace]:
    def make(name: str, readers: tuple[int, ...] = ()) -> Workspace:
        config = WorkspaceConfig(name, tmp_path / name, readers=readers, writers=(MEMD_UID,) if readers else ())
        ws = Workspace(config, counter, FixedClock(START), io)
        ws.open()
        return ws

    return make


def serve(tmp_path: Path, config: SearchConfig, *spaces: Workspace) -> Services:
    search = SearchService(config, tmp_path / "state" / "search.sqlite3")
    for ws in spaces:
        ws.sink = Fanout(None, (search.on_change,))  # the daemon gives this sink when it makes the workspace
    return Services({ws.name: ws for ws in spaces}, search)


def call(services: Services, uid: int = MEMD_UID) -> Call:
    return Call(services, Peer(pid=1, uid=uid, gid=uid))  # type: ignore[arg-type]


def log(action: str, result: str = "") -> Callable[[Draft], Any]:
    return lambda draft: draft.log(action, (), result or None)


def learn(category: str, text: str) -> Callable[[Draft], Any]:
    return lambda draft: draft.learn(category, text)


async def searched(services: Services, uid: int = MEMD_UID, **params: Any) -> dict[str, Any]:
    result: dict[str, Any] = await dispatch(call(services, uid), "memory.search", params)
    return result


def with_search(
    tmp_path: Path, make_workspace: Callable[..., Workspace], body: Callable[[Workspace, Services], Awaitable[None]]
) -> None:
    """Run `body` against workspace "alpha" served with search (SLOW: no background pass gets in between)."""
    ws = make_workspace("alpha")
    services = serve(tmp_path, SLOW, ws)

    async def go() -> None:
        await services.search.start([ws])
        await body(ws, services)
        await services.search.close()

    asyncio.run(go())


def test_a_write_is_found_by_the_next_search_without_waiting_for_the_indexer(
    tmp_path: Path, make_workspace: Callable[..., Workspace]
) -> None:
    async def body(ws: Workspace, services: Services) -> None:
        await ws.write(log("Rotated the signing keys", "all services restarted"))
        assert services.search.status()["pending"] == ["alpha"], "the listener only marked it"
        hits = (await searched(services, workspace="alpha", query="rotating keys"))["hits"]
        assert [h["heading"] for h in hits] == ["Rotated the signing keys"]
        assert services.search.status()["pending"] == []

    with_search(tmp_path, make_workspace, body)


def test_paging_returns_each_page_with_its_snippets_and_says_when_there_is_more(
    tmp_path: Path, make_workspace: Callable[..., Workspace]
) -> None:
    async def body(ws: Workspace, services: Services) -> None:
        for i in range(5):
            await ws.write(log(f"Rotated key {i}", f"signing key {i} rotated"))
        whole = await searched(services, workspace="alpha", query="rotated")
        assert len(whole["hits"]) == 5 and not whole["more"]
        pages = [await searched(services, workspace="alpha", query="rotated", offset=o, limit=2) for o in (0, 2, 4)]
        assert [p["more"] for p in pages] == [True, True, False]
        assert [h for p in pages for h in p["hits"]] == whole["hits"]
        assert all("\u00abRotated\u00bb" in h["snippet"] for h in whole["hits"])

    with_search(tmp_path, make_workspace, body)


def test_a_search_without_a_limit_returns_a_page_of_ten_and_says_there_is_more(
    tmp_path: Path, make_workspace: Callable[..., Workspace]
) -> None:
    async def body(ws: Workspace, services: Services) -> None:
        for i in range(12):
            await ws.write(log(f"Rotated key {i}", f"signing key {i} rotated"))
        first = await searched(services, workspace="alpha", query="rotated")
        assert len(first["hits"]) == 10 and first["more"]
        everything = await searched(services, workspace="alpha", query="rotated", limit=12)
        assert len(everything["hits"]) == 12 and not everything["more"]
        assert everything["hits"][:10] == first["hits"]

    with_search(tmp_path, make_workspace, body)


def test_the_background_pass_indexes_marked_workspaces_after_the_delay(
    tmp_path: Path, make_workspace: Callable[..., Workspace]
) -> None:
    ws = make_workspace("alpha")
    services = serve(tmp_path, SearchConfig(index_delay_seconds=0.01), ws)

    async def go() -> None:
        await services.search.start([ws])
        await ws.write(learn("Auth", "JWT secrets live in vault"))
        for _ in range(500):
            status = services.search.status()
            if not status["pending"] and not status["indexing"] and status["documents_indexed"]:
                break
            await asyncio.sleep(0.01)
        indexed = services.search.stats["files_indexed"]
        hits = (await searched(services, query="vault"))["hits"]
        assert services.search.stats["files_indexed"] == indexed, "the query had nothing left to index"
        assert [h["tier"] for h in hits] == ["cold"]
        await services.search.close()

    asyncio.run(go())


def test_without_a_workspace_only_readable_workspaces_are_searched_and_each_hit_is_checked(
    tmp_path: Path, make_workspace: Callable[..., Workspace]
) -> None:
    public, ruled = make_workspace("public"), make_workspace("ruled", readers=(READER,))
    services = serve(tmp_path, SLOW, public, ruled)

    async def go() -> None:
        await services.search.start([public, ruled])
        for ws in (public, ruled):
            await ws.write(log(f"deploy of {ws.name}"))
        everything = await searched(services, query="deploy")
        assert {h["workspace"] for h in everything["hits"]} == {"public", "ruled"}
        reader = await searched(services, READER, query="deploy")
        assert {h["workspace"] for h in reader["hits"]} == {"public", "ruled"}
        stranger = await searched(services, STRANGER, query="deploy")
        assert (stranger["workspaces"], [h["workspace"] for h in stranger["hits"]]) == (["public"], ["public"])
        with pytest.raises(AccessDenied):
            await searched(services, STRANGER, workspace="ruled", query="deploy")
        with pytest.raises(AccessDenied):  # rebuilding every workspace's index is for root and memd's uid
            await dispatch(call(services, READER), "memory.reindex", {})
        await services.search.close()

    asyncio.run(go())


@dataclass
class RecordingOutlet:
    """A connection that takes early answers (memd.early_ack.Outlet) and records who sent what, from which thread."""

    accepts: bool
    sent: list[tuple[str, bytes]] = field(default_factory=list)

    def encode_answer(self, request_id: Any, result: Any) -> bytes:
        return protocol.encode_result(request_id, result)

    def send_early(self, slot: Any, payload: bytes) -> bool:
        self.sent.append((threading.current_thread().name, payload))
        return self.accepts


@pytest.mark.parametrize("accepts", [True, False])
def test_the_query_thread_sends_a_searchs_answer_itself_and_the_loop_makes_the_same_one(
    tmp_path: Path, make_workspace: Callable[..., Workspace], accepts: bool
) -> None:
    # The loop sends the answer only when the query thread could not (memd.outbox decides): either way the client
    # gets the same bytes, the page the loop's result holds, checked for access once the hits are there.
    async def body(ws: Workspace, services: Services) -> None:
        for i in range(3):
            await ws.write(log(f"Rotated key {i}", f"signing key {i} rotated"))
        outlet = RecordingOutlet(accepts)
        to = Call(services, Peer(pid=1, uid=MEMD_UID, gid=MEMD_UID), reply_to=ReplyTo(outlet, "slot", 7))  # type: ignore[arg-type]
        result = await dispatch(to, "memory.search", {"workspace": "alpha", "query": "rotated", "limit": 2})
        assert len(result["hits"]) == 2 and result["more"] and result["workspaces"] == ["alpha"]
        ((thread, payload),) = outlet.sent
        assert thread.startswith("memd-search-q")
        assert payload == protocol.encode_result(7, result)

    with_search(tmp_path, make_workspace, body)


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"query": '"unclosed'}, "a quote is not closed"),
        ({"query": "jwt\x00"}, "NUL"),
        ({"query": "x" * 10_240}, "longer than 2000"),
        ({"query": "jwt", "tiers": ["hot", "lukewarm"]}, "'lukewarm' is not a tier"),
        ({"query": "jwt", "since": "2026-02-30"}, "calendar date"),
        ({"query": "jwt", "since": "2026-03-02", "until": "2026-03-01"}, "after 'until'"),
        ({"query": "jwt", "limit": 0}, "from 1 to 200"),
        ({"query": "jwt", "worksapce": "alpha"}, "unknown parameter"),
    ],
)
def test_bad_parameters_are_invalid_params(
    tmp_path: Path, make_workspace: Callable[..., Workspace], params: dict[str, Any], says: str
) -> None:
    ws = make_workspace("alpha")
    services = serve(tmp_path, SLOW, ws)

    async def go() -> None:
        await services.search.start([ws])
        with pytest.raises(InvalidParams) as caught:
            await searched(services, **params)
        assert says in caught.value.message
        await services.search.close()

    asyncio.run(go())


def test_context_and_learnings_rank_by_the_index_and_fall_back_to_substrings_without_it(
    tmp_path: Path, make_workspace: Callable[..., Workspace]
) -> None:
    ws = make_workspace("alpha")
    services = serve(tmp_path, SLOW, ws)

    async def go() -> tuple[list[str], list[str], list[str]]:
        await services.search.start([ws])
        await ws.write(learn("Deploys", "a canary runs for an hour before a rollout"))
        await ws.write(learn("Testing", "tests that rotate keys need the vault stub"))
        await ws.write(learn("Auth", "rotating the signing keys invalidates sessions"))
        ranked = await dispatch(call(services), "cold.get", {"workspace": "alpha", "topic": "key rotation"})
        context = await dispatch(call(services), "context.get", {"workspace": "alpha", "topic": "key rotation"})
        await services.search.close()
        off = serve(tmp_path / "off", SearchConfig(enabled=False), ws)
        await off.search.start([ws])
        plain = await dispatch(call(off), "cold.get", {"workspace": "alpha", "topic": "key rotation"})
        with pytest.raises(Unavailable):
            await searched(off, query="keys")
        await off.search.close()
        return (
            [lr["text"] for lr in ranked["learnings"]],
            [line for line in context["text"].split("\n") if line.startswith("- [")],
            [lr["text"] for lr in plain["learnings"]],
        )

    ranked, context, plain = asyncio.run(go())
    # Stemmed: "rotation" finds "rotate" and "rotating", "key" finds "keys"; the canary learning matches nothing.
    assert set(ranked) == {
        "tests that rotate keys need the vault stub",
        "rotating the signing keys invalidates sessions",
    }
    assert len(context) == 2
    assert set(plain) == set(ranked), "substring matching finds them too here: 'key' is in 'keys'"


def test_a_reindex_from_scratch_equals_what_the_writes_built(
    tmp_path: Path, make_workspace: Callable[..., Workspace]
) -> None:
    ws = make_workspace("alpha")
    services = serve(tmp_path, SLOW, ws)

    async def go() -> tuple[list[Any], list[Any], dict[str, Any]]:
        await services.search.start([ws])
        for i in range(20):
            await ws.write(log(f"step {i} of the migration", f"result {i}"))
            if i % 3 == 0:
                await searched(services, query="migration")  # catch up in between: increments
        await ws.write(learn("Data", "migrations run inside one transaction"))
        await searched(services, query="migration")
        before = services.search._store.rows("alpha")  # type: ignore[union-attr]
        result = await dispatch(call(services), "memory.reindex", {"workspace": "alpha"})
        after = services.search._store.rows("alpha")  # type: ignore[union-attr]
        await services.search.close()
        return before, after, result

    before, after, result = asyncio.run(go())
    assert before == after and len(after) == 21
    assert result["workspaces"] == {"alpha": 21}


def test_a_damaged_index_is_built_again_from_the_files_and_the_query_still_answers(
    tmp_path: Path, make_workspace: Callable[..., Workspace], monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = make_workspace("alpha")
    services = serve(tmp_path, SLOW, ws)

    async def go() -> tuple[list[str], dict[str, Any]]:
        await services.search.start([ws])
        await ws.write(log("Rotated the signing keys"))
        await searched(services, query="rotated")
        real = Searcher.search
        failures = iter([sqlite3.DatabaseError("database disk image is malformed")] * 2)  # query thread, then writer

        def damaged(self: Searcher, *args: Any) -> Any:
            for exc in failures:
                raise exc
            return real(self, *args)

        monkeypatch.setattr(Searcher, "search", damaged)
        hits = (await searched(services, query="rotated"))["hits"]
        status = services.search.status()
        await services.search.close()
        return [h["heading"] for h in hits], status

    headings, status = asyncio.run(go())
    assert headings == ["Rotated the signing keys"]
    assert status["rebuilds"] == 1 and status["available"] is True
