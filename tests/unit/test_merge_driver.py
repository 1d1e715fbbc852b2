"""The merges of memd's files (memd.merge_driver, memd.merge_cold): nothing either side added is lost, nothing is
doubled, what one side deleted and the other left alone stays deleted, and what cannot be merged is a conflict,
never a guess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from memd.merge_cold import merge_cold
from memd.merge_driver import kind_of, main, merge, merge_proposed, merge_warm
from memd.tiers import cold_format, proposals_format, warm_format

HEAD = "# Activity Log 2024-03-15 (UTC+00:00, UTC)\n\n"


def entry(time: str, action: str, result: str = "") -> str:
    return f"### {time} - {action}\n" + (f"Result: {result}\n" if result else "") + "\n"


def day(*entries: str) -> bytes:
    return (HEAD + "".join(entries)).encode()


def actions(data: bytes) -> list[str]:
    return [e.action for e in warm_format.parse_day(data.decode(), current=True)]


# --- warm day files ---------------------------------------------------------------------------------------------


def test_warm_keeps_both_sides_entries_once_each_in_time_order() -> None:
    base = day(entry("09:00:00", "start"))
    ours = day(entry("09:00:00", "start"), entry("10:00:00", "ours a"), entry("12:00:00", "ours b"))
    theirs = day(entry("09:00:00", "start"), entry("11:00:00", "theirs a"), entry("13:00:00", "theirs b"))

    merged = merge_warm(base, ours, theirs)

    assert actions(merged) == ["start", "ours a", "theirs a", "ours b", "theirs b"]
    assert merged.startswith(HEAD.encode())
    assert merged.count(b"# Activity Log") == 1


def test_warm_entry_added_identically_on_both_sides_is_kept_once() -> None:
    same = entry("10:00:00", "same", "ok")
    merged = merge_warm(b"", day(same, entry("10:00:01", "o")), day(same, entry("09:59:00", "t")))

    assert actions(merged) == ["t", "same", "o"]


def test_warm_same_day_from_two_hosts_without_a_common_ancestor_merges_into_one_file() -> None:
    merged = merge_warm(b"", day(entry("08:00:00", "laptop")), day(entry("07:00:00", "server")))

    assert actions(merged) == ["server", "laptop"]
    assert merged.count(b"# Activity Log") == 1


def test_warm_repeated_entry_on_one_side_keeps_its_count() -> None:
    twice = entry("10:00:00", "retry")
    merged = merge_warm(day(), day(twice, twice), day(entry("11:00:00", "t")))

    assert actions(merged) == ["retry", "retry", "t"]


def test_warm_entry_deleted_on_one_side_and_untouched_on_the_other_stays_deleted() -> None:
    base = day(entry("09:00:00", "secret"), entry("09:30:00", "keep"))
    ours = day(entry("09:30:00", "keep"))  # a person removed it here
    theirs = day(entry("09:00:00", "secret"), entry("09:30:00", "keep"), entry("10:00:00", "new"))

    assert actions(merge_warm(base, ours, theirs)) == ["keep", "new"]


def test_warm_entry_without_final_blank_line_is_the_same_entry() -> None:
    e = entry("09:00:00", "last", "done")
    merged = merge_warm(b"", day(e).rstrip(b"\n"), day(e, entry("10:00:00", "more")))

    assert actions(merged) == ["last", "more"]


def test_warm_is_ours_byte_for_byte_when_theirs_adds_nothing() -> None:
    ours = day(entry("09:00:00", "a")) + b"trailing prose   \n"
    assert merge_warm(day(), ours, day()) == ours
    assert merge_warm(day(), ours, ours) == ours


def test_warm_result_parses_as_every_entry_of_both_sides() -> None:
    detailed = warm_format.render_entry(
        warm_format.WarmEntry("10:00:00", "with details", (("file", "a.py"), ("note", "two\nlines")), "ok")
    )
    merged = merge_warm(b"", day(detailed), day(entry("09:00:00", "early")))
    parsed = warm_format.parse_day(merged.decode(), current=True)

    assert [e.action for e in parsed] == ["early", "with details"]
    assert parsed[1].details == (("file", "a.py"), ("note", "two\nlines"))


# --- cold/MEMORY.md ---------------------------------------------------------------------------------------------


def memory(*sections: tuple[str, list[str]]) -> bytes:
    text = "# Agent Memory\n"
    for category, lines in sections:
        text += f"\n## {category}\n" + "".join(f"- [2024-03-01] {line}\n" for line in lines)
    return text.encode()


def learnings(data: bytes) -> list[tuple[str, str]]:
    return [(x.category, x.text) for x in cold_format.parse_memory(data.decode())]


def test_cold_keeps_learnings_of_both_sides_under_their_categories() -> None:
    base = memory(("Auth", ["old"]))
    ours = memory(("Auth", ["ours", "old"]), ("Ours only", ["o"]))
    theirs = memory(("Auth", ["theirs", "old"]), ("Testing", ["t"]))

    merged = merge_cold(base, ours, theirs)

    assert merged.clean
    assert learnings(merged.data) == [
        ("Auth", "theirs"),
        ("Auth", "ours"),
        ("Auth", "old"),
        ("Ours only", "o"),
        ("Testing", "t"),
    ]


def test_cold_deduplicates_by_text_whatever_the_dates() -> None:
    ours = b"# Agent Memory\n\n## A\n- [2024-03-01] same\n"
    theirs = b"# Agent Memory\n\n## A\n- [2024-03-02] same\n- [2024-03-02] other\n"

    merged = merge_cold(b"# Agent Memory\n", ours, theirs)

    assert learnings(merged.data) == [("A", "other"), ("A", "same")]
    assert b"[2024-03-01] same" in merged.data


def test_cold_learning_deleted_on_one_side_and_untouched_on_the_other_stays_deleted() -> None:
    base = memory(("A", ["keep", "drop"]))
    ours = memory(("A", ["keep"]))
    theirs = memory(("A", ["new", "keep", "drop"]))

    assert learnings(merge_cold(base, ours, theirs).data) == [("A", "new"), ("A", "keep")]


def test_cold_section_deleted_on_one_side_stays_deleted_unless_the_other_added_to_it() -> None:
    base = memory(("A", ["a"]), ("B", ["b"]))
    assert learnings(merge_cold(base, memory(("A", ["a"])), memory(("A", ["a2", "a"]), ("B", ["b"]))).data) == [
        ("A", "a2"),
        ("A", "a"),
    ]
    kept = merge_cold(base, memory(("A", ["a"])), memory(("A", ["a"]), ("B", ["b2", "b"]))).data
    assert learnings(kept) == [("A", "a"), ("B", "b2")]


def test_cold_same_learning_edited_differently_on_both_sides_is_a_conflict() -> None:
    base = memory(("Auth", ["tokens expire after 1h"]))
    ours = memory(("Auth", ["tokens expire after 2h"]))
    theirs = memory(("Auth", ["tokens expire after 30m"]))

    merged = merge_cold(base, ours, theirs)

    assert not merged.clean
    assert "edited on both sides" in merged.conflicts[0]


def test_cold_same_edit_on_both_sides_or_edit_on_one_side_merges() -> None:
    base = memory(("Auth", ["tokens expire after 1h", "x"]))
    edited = memory(("Auth", ["tokens expire after 2h", "x"]))
    assert merge_cold(base, edited, edited).data == edited
    merged = merge_cold(base, edited, memory(("Auth", ["new", "tokens expire after 1h", "x"])))
    assert merged.clean
    assert learnings(merged.data) == [("Auth", "new"), ("Auth", "tokens expire after 2h"), ("Auth", "x")]


def test_cold_prose_changed_on_one_side_is_taken_and_on_both_is_a_conflict() -> None:
    base = b"# Agent Memory\n\n## A\nabout A\n- [2024-03-01] a\n"
    theirs_prose = b"# Agent Memory\n\n## A\nabout A, rewritten\n- [2024-03-01] a\n"
    ours_added = b"# Agent Memory\n\n## A\nabout A\n- [2024-03-02] new\n- [2024-03-01] a\n"

    merged = merge_cold(base, ours_added, theirs_prose)
    assert merged.clean
    assert merged.data == b"# Agent Memory\n\n## A\nabout A, rewritten\n- [2024-03-02] new\n- [2024-03-01] a\n"

    both = merge_cold(base, base.replace(b"about A", b"ours"), base.replace(b"about A", b"theirs"))
    assert not both.clean


def test_cold_keeps_ours_bytes_when_theirs_brings_nothing_new() -> None:
    ours = b"# Agent Memory\r\n\r\n## A\r\n- [2024-03-01] a   \r\n"
    assert merge_cold(b"", ours, b"# Agent Memory\n\n## A\n- [2024-03-01] a\n").data == ours


def test_cold_a_section_in_a_fence_is_prose() -> None:
    ours = b"# Agent Memory\n\n```\n## Not a section\n- [2024-03-01] not a learning\n```\n\n## A\n- [2024-03-01] a\n"
    theirs = b"# Agent Memory\n\n## A\n- [2024-03-01] t\n"
    merged = merge_cold(b"# Agent Memory\n", ours, theirs)
    assert learnings(merged.data) == [("A", "t"), ("A", "a")]


# --- hot, proposals, kinds --------------------------------------------------------------------------------------


def test_hot_is_ours_when_this_side_changed_it() -> None:
    assert merge("hot", b"{}", b'{"session_id": "laptop"}\n', b'{"session_id": "server"}\n').data == (
        b'{"session_id": "laptop"}\n'
    )


def test_hot_is_theirs_when_this_side_left_it_as_the_ancestor_had_it() -> None:
    base = b'{"session_id": "server", "current_step": "1"}\n'
    theirs = b'{"session_id": "server", "current_step": "2"}\n'
    assert merge("hot", base, base, theirs).data == theirs


def proposal(pid: str, category: str, text: str, kind: str = "decision") -> proposals_format.Proposal:
    return proposals_format.Proposal(pid, category, "2024-03-01", text, "2024-03-01", "10:00:00", "did it", kind)


def proposals(*items: proposals_format.Proposal) -> bytes:
    text = ""
    for item in items:
        text = proposals_format.insert(text, item)
    return text.encode()


def parsed(data: bytes) -> list[tuple[str, str, str, str]]:
    return [(p.id, p.category, p.text, p.kind) for p in proposals_format.parse(data.decode())]


def test_proposed_keeps_both_sides_proposals_whole_under_their_own_sections() -> None:
    a = proposal("p-aaaaaaaa", "Decisions", "use sqlite")
    base = proposals(a)
    ours = proposals(a, proposal("p-bbbbbbbb", "Fixes", "pin the parser", "fix"))
    theirs = proposals(a, proposal("p-cccccccc", "Decisions", "drop python 3.9"))

    merged = merge_proposed(base, ours, theirs)

    assert parsed(merged) == [
        ("p-aaaaaaaa", "Decisions", "use sqlite", "decision"),
        ("p-cccccccc", "Decisions", "drop python 3.9", "decision"),  # under its section, with its kind
        ("p-bbbbbbbb", "Fixes", "pin the parser", "fix"),
    ]
    assert merged.count(b"## Decisions") == 1
    assert merge("proposed", base, ours, theirs).data == merged


def test_proposed_new_on_both_sides_is_kept_once_and_a_new_section_comes_whole() -> None:
    same = proposal("p-dddddddd", "Decisions", "same on both")
    theirs_only = proposal("p-eeeeeeee", "Ops", "rotate logs", "notable")

    merged = merge_proposed(b"", proposals(same), proposals(same, theirs_only))

    assert parsed(merged) == [
        ("p-dddddddd", "Decisions", "same on both", "decision"),
        ("p-eeeeeeee", "Ops", "rotate logs", "notable"),
    ]
    assert b"## Ops\n- [2024-03-01] rotate logs\n  - id: p-eeeeeeee\n" in merged


def test_proposed_accepted_or_rejected_on_one_side_stays_gone() -> None:
    a, b = proposal("p-aaaaaaaa", "Decisions", "use sqlite"), proposal("p-bbbbbbbb", "Decisions", "keep it")
    base = proposals(a, b)

    assert parsed(merge_proposed(base, proposals(a, b), proposals(b))) == [
        ("p-bbbbbbbb", "Decisions", "keep it", "decision")
    ]
    assert parsed(merge_proposed(base, proposals(b), proposals(a, b))) == [
        ("p-bbbbbbbb", "Decisions", "keep it", "decision")
    ]


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("hot/context.json", "hot"),
        ("hot/memd.json", "hot"),
        ("cold/MEMORY.md", "cold"),
        ("cold/PROPOSED.md", "proposed"),
        ("warm/2024-03-15.md", "warm"),
        ("warm/notes.md", None),
        ("warm/archive/2024-03.md.gz", None),
    ],
)
def test_kind_of(path: str, kind: str | None) -> None:
    assert kind_of(path) == kind


# --- the driver ---------------------------------------------------------------------------------------------------


def test_driver_writes_the_merge_into_ours_and_exits_0(tmp_path: Path) -> None:
    files = {name: tmp_path / name for name in ("O", "A", "B")}
    files["O"].write_bytes(day())
    files["A"].write_bytes(day(entry("10:00:00", "a")))
    files["B"].write_bytes(day(entry("09:00:00", "b")))

    assert main(["warm", str(files["O"]), str(files["A"]), str(files["B"]), "warm/2024-03-15.md"]) == 0
    assert actions(files["A"].read_bytes()) == ["b", "a"]


def test_driver_reports_a_conflict_with_markers_and_exits_1(tmp_path: Path) -> None:
    files = {name: tmp_path / name for name in ("O", "A", "B")}
    files["O"].write_bytes(memory(("A", ["tokens expire after 1h"])))
    files["A"].write_bytes(memory(("A", ["tokens expire after 2h"])))
    files["B"].write_bytes(memory(("A", ["tokens expire after 3h"])))

    assert main(["cold", *(str(files[n]) for n in "OAB")]) == 1
    text = files["A"].read_bytes()
    assert text.startswith(b"<<<<<<< ours\n") and b"=======\n" in text and text.endswith(b">>>>>>> theirs\n")


def test_driver_runs_as_a_module_and_refuses_bad_arguments(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "memd.merge_driver", "nope"], capture_output=True, check=False)
    assert out.returncode == 2 and b"usage" in out.stderr


def test_cold_files_made_on_two_machines_without_a_common_ancestor_merge() -> None:
    ours = memory(("Topic 0", ["a0"]), ("Topic 1", ["a1"]))
    theirs = memory(("Topic 1", ["b1"]), ("Topic 0", ["b0"]))

    merged = merge_cold(b"", ours, theirs)

    assert merged.clean, merged.conflicts
    assert sorted(learnings(merged.data)) == [
        ("Topic 0", "a0"),
        ("Topic 0", "b0"),
        ("Topic 1", "a1"),
        ("Topic 1", "b1"),
    ]
