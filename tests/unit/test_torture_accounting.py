"""Specification of the torture harness's accounting of compressed hot entries (torture/verify.py `account`): a
note or decision missing from hot counts as compressed only where the files prove it, never by default. The
harness is not a package on the test path, so its module is loaded from its file."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from memd.tiers.flush_identities import FLUSHED_NOTE
from memd.tiers.warm_format import WarmEntry

REPO = Path(__file__).resolve().parents[2]


def _load_verify() -> ModuleType:
    spec = importlib.util.spec_from_file_location("torture_verify", REPO / "torture" / "verify.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


verify = _load_verify()
NOTE, DECISION = "h-soak0x0-7", "d-soak0x0-8"


def flushed(text: str, checkpoint: str = "ckpt-1") -> WarmEntry:
    details = (("id", "n-7"), ("ts", "2026-12-02T10:00:00Z"), ("text", text), ("checkpoint", checkpoint))
    return WarmEntry(time="10:00:01", action=FLUSHED_NOTE, details=details, result=None)


def recorded(label: str) -> WarmEntry:
    return WarmEntry(time="10:00:00", action=f"decision: {label}", details=(("reason", "r"),), result=None)


def state(tmp_path: Path, *entries: WarmEntry, checkpoints: list[dict[str, Any]] | None = None) -> Any:
    hot = {"notes": [], "decisions": [], "checkpoints": checkpoints or []}
    return verify.WsState(root=tmp_path, hot=hot, warm={"2026-12-02.md": list(entries)})


def ledger(*labels: str) -> Any:
    idents = {NOTE: "n-7", DECISION: "d-8"}
    return verify.Ledger(acked={label: idents[label] for label in labels}, sent=set(labels))


def test_a_note_flushed_once_to_warm_is_compressed_only_when_the_caller_allows_the_warm_log(tmp_path: Path) -> None:
    ws = state(tmp_path, flushed(NOTE))

    allowed = verify.account(ws, ledger(NOTE), compressed_ok=True, flushed_ok=True)
    strict = verify.account(ws, ledger(NOTE), compressed_ok=True)

    assert (allowed.compressed, allowed.lost) == (1, [])
    assert strict.lost == [f"{NOTE} missing from hot notes"]


def test_a_note_neither_in_hot_nor_flushed_is_lost(tmp_path: Path) -> None:
    acc = verify.account(state(tmp_path, flushed("h-soak0x0-6")), ledger(NOTE), compressed_ok=True, flushed_ok=True)

    assert acc.lost == [f"{NOTE} missing from hot notes"]


def test_a_note_flushed_twice_is_a_duplicate(tmp_path: Path) -> None:
    ws = state(tmp_path, flushed(NOTE), flushed(NOTE, "ckpt-2"))

    acc = verify.account(ws, ledger(NOTE), compressed_ok=True, flushed_ok=True)

    assert acc.duplicated == [f"{NOTE} x2 flushed to warm"]


@pytest.mark.parametrize("flushed_ok", [True, False])
def test_a_decision_missing_from_hot_needs_a_record_naming_it_whatever_its_warm_entry(
    tmp_path: Path, flushed_ok: bool
) -> None:
    unnamed = verify.account(state(tmp_path, recorded(DECISION)), ledger(DECISION), True, flushed_ok=flushed_ok)
    named = verify.account(
        state(tmp_path, recorded(DECISION), checkpoints=[{"id": "ckpt-1", "compressed": ["d-8"]}]),
        ledger(DECISION),
        True,
        flushed_ok=flushed_ok,
    )

    assert unnamed.lost == [f"{DECISION} missing from hot decisions"]
    assert (named.compressed, named.lost) == (1, [])


def test_memory_md_may_end_with_a_run_of_blocks_a_burst_appended_and_nowhere_else_repeat_a_heading() -> None:
    base = "# Agent Memory\n\n## A\n- [2024-01-01] a1\n\n## B\n- [2024-01-01] b1\n"
    run = "\n## A\n- [2024-01-02] a2\n\n## B\n- [2024-01-02] b2\n"
    v = _load_verify()

    assert v.trailing_blocks(base + run) == len(run)
    assert v.cold_problems(base + run, v.trailing_blocks(base + run)) == []
    twice = base + "\n## A\n- [2024-01-02] a2\n- [2024-01-03] a3\n"  # a repeat of two lines: no block
    assert v.trailing_blocks(twice) == 0
    assert v.cold_problems(twice, v.trailing_blocks(twice)) == ["cold/MEMORY.md: heading '## A' appears 2 times"]
