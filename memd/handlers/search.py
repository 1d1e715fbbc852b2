"""Search methods: `memory.search` across tiers and workspaces, `memory.reindex`, and the topic ranking of learnings
that `context.get` and `cold.get` use.

Access holds per hit: without a workspace, the search covers exactly the workspaces the peer may read, and every
hit is checked again before it is returned. Query syntax errors are InvalidParams (memd.search.query), never an
SQLite error. Imports memd.handlers.access, memd.search, the cold selection, memd.params and memd.errors.
"""

from __future__ import annotations

from datetime import date
from typing import Any

from memd.errors import InvalidParams
from memd.handlers.access import Call, may_access
from memd.params import Params
from memd.search import query as q
from memd.search.service import Request
from memd.tiers import cold_selection
from memd.tiers.cold_format import Learning
from memd.tiers.cold_learnings import Ranked
from memd.workspace import Workspace

TIERS = ("hot", "warm", "cold")


def _tiers(p: Params) -> tuple[str, ...]:
    wanted = p.text_list("tiers")
    unknown = sorted(set(wanted) - set(TIERS))
    if unknown:
        raise InvalidParams(
            f"parameter 'tiers': {', '.join(map(repr, unknown))} is not a tier; choose from hot, warm, cold",
            data={"param": "tiers"},
        )
    return tuple(t for t in TIERS if t in wanted) if wanted else TIERS


def _day(p: Params, key: str) -> str | None:
    text = p.optional_text(key)
    if text is None:
        return None
    try:
        if len(text) == 10:
            return date.fromisoformat(text).isoformat()
    except ValueError:
        pass
    raise InvalidParams(f"parameter {key!r} must be a calendar date YYYY-MM-DD, got {text!r}", data={"param": key})


async def memory_search(call: Call, p: Params) -> Any:
    text = p.text("query")
    request = Request(
        q.parse(text), _tiers(p), _day(p, "since"), _day(p, "until"), p.integer("limit"), p.integer("offset")
    )
    if request.since and request.until and request.since > request.until:
        raise InvalidParams("parameter 'since' is after 'until'", data={"param": "since"})
    if call.workspace is not None:
        spaces = [call.workspace]
    else:
        spaces = [ws for _, ws in sorted(call.services.workspaces().items()) if may_access(call, ws, "read")]

    def answer(page: dict[str, Any], _usage: object = None) -> dict[str, Any]:
        # Access is checked again per hit once the hits are there (a reload may have revoked some meanwhile);
        # on the query thread when it sends the answer itself (the rules are plain reads of frozen config).
        readable = {ws.name for ws in spaces if may_access(call, ws, "read")}
        return {
            "query": text,
            "workspaces": sorted(readable),
            "hits": [hit for hit in page["hits"] if hit["workspace"] in readable],
            "more": page["more"],
        }

    return answer(await call.services.search.search(spaces, request, call.early(answer)))


async def memory_reindex(call: Call, p: Params) -> Any:
    if call.workspace is not None:
        return await call.services.search.reindex([call.workspace], everything=False)
    return await call.services.search.reindex(list(call.services.workspaces().values()), everything=True)


async def ranked_learnings(call: Call, ws: Workspace, topic: str | None) -> Ranked | None:
    """The learnings for `topic`, best first, ranked by the search index (BM25 over stemmed words, then
    substrings), followed by any the substring rule of cold_selection.relevant finds that the index did not (made
    only if a read renders that far: the index's own fill the budget when it finds enough); None (use
    cold_selection.relevant) without a topic or when the index cannot answer promptly."""
    if not topic:
        return None
    found = await call.services.search.rank_cold(ws, topic)
    if found is None:
        return None
    parsed = ws.cold.parsed
    matches = cold_selection.matcher(cold_selection.topic_words(topic))
    ranked: dict[Learning, None] = {}
    listed = 0  # the rule's learnings that are copies of a ranked one are not listed again
    for key in found:
        got = parsed.first_and_copies(key)
        if got is not None and got[0] not in ranked:
            ranked[got[0]] = None
            listed += got[1] if matches(got[0]) else 0
    return Ranked(list(ranked), lambda: parsed.relevant(topic), len(ranked) + parsed.relevant_count(topic) - listed)
