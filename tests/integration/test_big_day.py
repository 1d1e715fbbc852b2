"""A real daemon with a big day in its warm log: `context.get` gives the newest entries within budget,
`warm.recent` pages through every entry exactly once while agents keep logging, and a person's edit of the day file
shows in the next read (what memd keeps parsed is dropped)."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from harness import RunningDaemon, base_config

from memd.errors import MemdError
from memd.tiers import warm_format
from memd.tiers.warm_format import WarmEntry

ENTRIES = 6_000  # about 350 KB: more than a worker-thread parse's threshold, quick to write
INVALID_PARAMS = -32602


def today() -> str:
    return datetime.now(UTC).date().isoformat()


def write_day(warm: Path, entries: int) -> Path:
    warm.mkdir(parents=True, exist_ok=True)
    now = datetime.now(UTC)
    parts = [warm_format.day_header(now.date(), warm_format.zone_label(now, "UTC"))]
    parts += [
        warm_format.render_entry(WarmEntry("08:00:00", f"entry {i}", (("n", str(i)),), "ok")) for i in range(entries)
    ]
    path = warm / warm_format.day_filename(now.date())
    path.write_text("".join(parts), encoding="utf-8")
    return path


@pytest.fixture
def memd(make_daemon: Callable[..., RunningDaemon], short_root: Path) -> RunningDaemon:
    root = short_root / "d"
    write_day(root / "ws" / "big" / "warm", ENTRIES)
    config = base_config(root, {"big": root / "ws" / "big"}, warm={"timezone": "UTC"}, search={"enabled": False})
    return make_daemon("d", config=config)


def actions(page: dict[str, Any]) -> list[str]:
    """The page's actions, newest first."""
    return [e["action"] for day in page["days"] for e in reversed(day["entries"])]


def test_context_of_a_big_day_holds_its_newest_entries_within_the_warm_budget(memd: RunningDaemon) -> None:
    memd.call("warm.log", workspace="big", action="the newest")

    context = memd.call("context.get", workspace="big")

    included = context["included"]["warm"]
    assert 0 < included < ENTRIES
    assert context["omitted"]["warm"] == ENTRIES + 1 - included
    assert context["usage"]["warm"]["tokens"] <= context["usage"]["warm"]["budget"]
    text = context["text"]
    assert (
        text.index("- the newest\n") < text.index(f"- entry {ENTRIES - 1}\n") < text.index(f"- entry {ENTRIES - 2}\n")
    )
    assert f"- entry {ENTRIES - included}\n" not in text  # the oldest entries are the ones left out


def test_warm_recent_pages_through_every_entry_exactly_once_while_agents_log(memd: RunningDaemon) -> None:
    seen: list[str] = []
    before = None
    with memd.client() as c:
        while True:
            page = c.call("warm.recent", workspace="big", days=1, limit=1000, **({"before": before} if before else {}))
            assert sum(len(day["entries"]) for day in page["days"]) <= 1000
            seen += actions(page)
            c.call("warm.log", workspace="big", action=f"logged between pages {len(seen)}")
            before = page["next"]
            if before is None:
                break

    assert seen == [f"entry {i}" for i in range(ENTRIES - 1, -1, -1)]


def test_warm_recent_returns_a_default_page_of_the_newest_entries(memd: RunningDaemon) -> None:
    page = memd.call("warm.recent", workspace="big", days=1)

    assert actions(page) == [f"entry {i}" for i in range(ENTRIES - 1, ENTRIES - 101, -1)]
    assert page["next"] == f"{today()}#{ENTRIES - 100}"


@pytest.mark.parametrize("before", ["yesterday", "2024-13-01", "2024-03-15#-1", "2024-03-15#x"])
def test_a_page_position_that_next_never_returns_is_invalid(memd: RunningDaemon, before: str) -> None:
    with pytest.raises(MemdError) as error:
        memd.call("warm.recent", workspace="big", before=before)

    assert error.value.code == INVALID_PARAMS


def test_a_person_appending_to_or_rewriting_the_big_day_shows_in_the_next_read(memd: RunningDaemon) -> None:
    path = memd.workspace("big") / "warm" / warm_format.day_filename(datetime.now(UTC).date())
    assert actions(memd.call("warm.recent", workspace="big", days=1, limit=1)) == [f"entry {ENTRIES - 1}"]

    with open(path, "a", encoding="utf-8") as f:  # echo ... >> warm/DAY.md
        f.write("### 09:00:00 - appended by hand\nResult: fine\n")
    assert actions(memd.call("warm.recent", workspace="big", days=1, limit=1)) == ["appended by hand"]

    data = path.read_bytes().replace(b"- entry 5\n", b"- entry five, edited\n")
    tmp = path.with_name("edit.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)  # an editor's save

    first = memd.call("warm.recent", workspace="big", days=1, limit=1)
    early = memd.call("warm.recent", workspace="big", days=1, limit=10, before=f"{today()}#10")
    assert actions(first) == ["appended by hand"]
    assert actions(early) == [f"entry {i}" for i in (9, 8, 7, 6)] + ["entry five, edited"] + [
        f"entry {i}" for i in (4, 3, 2, 1, 0)
    ]
    assert "- entry five, edited\n" in memd.call("context.get", workspace="big", all=True)["text"]
