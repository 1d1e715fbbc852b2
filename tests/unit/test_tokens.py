"""Specification of token counting (memd.tokens): offline cl100k_base, incremental counts, budgets in tokens."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from datetime import date, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memd
from memd.errors import Unavailable
from memd.tiers.cold_format import render_learning
from memd.tiers.warm_format import WarmEntry, day_header, render_entry
from memd.tokens import TierUsage, TokenCounter, load_encoding

# --- loading -------------------------------------------------------------------------------------------------

OFFLINE_CHILD = r"""
import json, os, socket, sys

def no_network(*args, **kwargs):
    raise OSError(101, "Network is unreachable (blocked by the test)")

socket.socket.connect = no_network
socket.socket.connect_ex = no_network
socket.create_connection = no_network
socket.getaddrinfo = no_network

from memd.errors import Unavailable
from memd.tokens import TokenCounter

counter = TokenCounter.for_encoding("cl100k_base")
result = {"count": counter.count("hello world, déjà vu 日本語"), "name": counter.name}
try:
    TokenCounter.for_encoding("r50k_base")  # not bundled: it would need the network
    result["r50k"] = "loaded"
except Unavailable as exc:
    result["r50k"] = "unavailable"
print(json.dumps(result))
"""


def run_offline_child(tmp_path: Path, cache_dir: Path) -> subprocess.CompletedProcess[str]:
    package_root = str(Path(memd.__file__).resolve().parent.parent)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TIKTOKEN_CACHE_DIR": str(cache_dir)}
    return subprocess.run(
        [sys.executable, "-c", OFFLINE_CHILD],
        env={**env, "PYTHONPATH": package_root},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_cl100k_base_loads_and_counts_with_the_network_unreachable(tmp_path: Path) -> None:
    cache = tmp_path / "tiktoken-cache"
    cache.mkdir()

    done = run_offline_child(tmp_path, cache)

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["count"] > 0
    assert result["r50k"] == "unavailable"  # the network really was unreachable in the child


def test_cl100k_base_loads_when_tiktoken_cache_dir_is_not_writable(tmp_path: Path) -> None:
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("x")

    done = run_offline_child(tmp_path, not_a_directory / "cache")

    assert done.returncode == 0, done.stderr[-2000:]


def test_an_unknown_encoding_is_unavailable_and_the_message_says_where_to_put_its_data() -> None:
    with pytest.raises(Unavailable) as error:
        load_encoding("no_such_encoding_base")

    assert "no_such_encoding_base" in error.value.message
    assert "TIKTOKEN_CACHE_DIR" in error.value.message


def test_the_counter_names_its_encoding(counter: TokenCounter) -> None:
    assert "cl100k_base" in counter.name


# --- counting ------------------------------------------------------------------------------------------------


def test_counting_the_empty_string_is_zero(counter: TokenCounter) -> None:
    assert counter.count("") == 0
    assert counter.count_piece("") == 0


def test_a_cached_piece_counts_the_same_as_a_fresh_count(counter: TokenCounter) -> None:
    piece = "- [2024-03-15] Use WAL mode for SQLite in tests\n"

    assert counter.count_piece(piece) == counter.count_piece(piece) == counter.count(piece)
    assert counter.count_lines([piece, piece, "x" * 5000]) == 2 * counter.count(piece) + counter.count("x" * 5000)


ACTIONS = [
    "Refactored JWT validation",
    "Ran test suite",
    "Fixed flaky test in test_scheduler.py",
    "Reviewed PR #4821: «naïve» datetime handling",
    "Deployed to staging — rollback plan ready",
    "Investigated OOM in worker pool (RSS 3.2 GiB → 1.1 GiB)",
    "Migrated config from YAML to TOML",
    "日本語のドキュメントを更新",
    "Benchmarked fsync latency: p50 125µs, p99 240µs",
    "Added retry with exponential backoff 🚀",
]
DETAIL_VALUES = [
    "auth/jwt.py",
    "src/memd/workspace.py:142",
    "pytest -q tests/auth -k 'not slow' --maxfail=1",
    "45",
    "12.4s",
    "3 failed, 41 passed, 2 skipped",
    "def f(x: int) -> int:\n    return x * 2  # doubled",
    "SELECT id, name FROM users WHERE created_at > '2024-01-01' AND status = \"active\";",
    "Ünïcödé ñame with emoji 🎉 and CJK 中文字符",
    "0x7ffd5e8c9a40",
    "https://example.org/issues/4821?tab=comments#c17",
    "{'retries': 3, 'backoff': [0.1, 0.2, 0.4]}",
]
RESULTS = [None, "Success", "3 failed, 41 passed", "Rolled back after 2 min", "OK — 0 regressions", "❌ timeout"]
CATEGORIES = ["Testing", "Deployment", "Code Style", "Performance", "Data", "国际化"]


def realistic_corpus(rng: random.Random) -> list[str]:
    """A few hundred warm entries (a day file per ten of them) and learning lines, each rendered the way
    memd writes it: the newline-terminated pieces the stores count one by one."""
    pieces: list[str] = []
    day = date(2024, 3, 1)
    for i in range(300):
        if i % 10 == 0:
            day += timedelta(days=1)
            pieces.append(day_header(day, "UTC+01:00, Europe/Paris"))
        details = tuple(
            (
                rng.choice(["file", "command", "lines_changed", "duration", "note", "query", "url"]),
                rng.choice(DETAIL_VALUES),
            )
            for _ in range(rng.randint(0, 4))
        )
        action = rng.choice(ACTIONS)
        if rng.random() < 0.1:
            action += " " + " ".join(rng.choice(DETAIL_VALUES) for _ in range(20))  # a long line
        entry = WarmEntry(f"{9 + i % 10:02d}:{i % 60:02d}:{(7 * i) % 60:02d}", action, details, rng.choice(RESULTS))
        pieces.append(render_entry(entry))
    for i in range(200):
        text = f"[{rng.choice(CATEGORIES)}] " + " ".join(rng.choice(ACTIONS + DETAIL_VALUES) for _ in range(3))
        pieces.append(render_learning(f"2024-03-{1 + i % 28:02d}", text + f" (seen {i} times)"))
    return pieces


def test_summed_per_piece_counts_stay_within_one_percent_of_a_full_recount(counter: TokenCounter) -> None:
    pieces = realistic_corpus(random.Random(7))
    full_text = "".join(pieces)

    incremental = sum(counter.count(piece) for piece in pieces)
    full = counter.count(full_text)
    error = abs(incremental - full) / full

    message = f"incremental {incremental} vs full {full} tokens over {len(pieces)} pieces: error {error:.4%}"
    print(message)
    assert len(pieces) >= 500 and full > 20_000, message
    assert error < 0.01, message


# --- usage and truncation ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tokens", "budget", "percent"),
    [(0, 100, 0.0), (50, 200, 25.0), (1, 3, 33.3), (2, 3, 66.7), (150, 100, 150.0), (5, 0, 0.0)],
)
def test_tier_usage_percent_is_rounded_to_one_decimal_and_zero_without_a_budget(
    tokens: int, budget: int, percent: float
) -> None:
    usage = TierUsage(tokens, budget)

    assert usage.percent == percent
    assert usage.as_dict() == {"tokens": tokens, "budget": budget, "percent": percent}


def test_truncate_keeps_text_that_fits_whole(counter: TokenCounter) -> None:
    text = "Task: refactor the auth module\n"

    assert counter.truncate(text, counter.count(text)) == text
    assert counter.truncate(text, 10_000) == text


def test_truncate_to_zero_tokens_is_empty(counter: TokenCounter) -> None:
    assert counter.truncate("anything at all", 0) == ""
    assert counter.truncate("anything at all", -3) == ""


def test_truncate_keeps_a_prefix_within_the_limit_for_ascii_text(counter: TokenCounter) -> None:
    text = " ".join(ACTIONS[:3] + DETAIL_VALUES[:8]) * 3

    for limit in range(1, counter.count(text)):
        cut = counter.truncate(text, limit)
        assert counter.count(cut) <= limit
        assert text.startswith(cut)
    assert counter.count(counter.truncate(text, 20)) == 20


def test_truncate_keeps_a_prefix_within_the_limit_for_any_text(counter: TokenCounter) -> None:
    text = "क्क्"  # Devanagari: two characters of several tokens each

    cut = counter.truncate(text, 2)

    assert text.startswith(cut)
    assert counter.count(cut) <= 2


# --- long texts ----------------------------------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.sampled_from([*"ab \t\n\r-.'1é日\u2028", "\n\n", " \n", "'s", "\r\n", "word"]), max_size=120).map(
        "".join
    ),
    st.integers(min_value=1, max_value=40),
)
def test_a_long_text_counted_in_pieces_counts_what_the_whole_text_counts(
    counter: TokenCounter, text: str, size: int
) -> None:
    """A MEMORY.md of megabytes is counted in pieces (tiktoken makes a Python int per token: ~20 MB at once for
    2 MB counted whole); cutting only after a line break that a non-space character follows changes no token."""
    assert counter.count_in_pieces(text, size) == len(counter._encoding.encode_ordinary(text))


def test_a_text_longer_than_a_piece_is_counted_in_pieces_and_exactly(counter: TokenCounter) -> None:
    from memd import tokens

    lines = [render_learning("2026-12-03", f"learning {i}: {'word ' * (i % 7)}") for i in range(4000)]
    text = "# Memory\n\n## Ops\n" + "".join(lines) + "\n\n  indented\n\tlast"
    assert len(text) > 2 * tokens.COUNT_PIECE_CHARS

    assert counter.count(text) == len(counter._encoding.encode_ordinary(text))


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.sampled_from([*"ab \t\n\r-.'1é日\u2028#*", "\n\n", " \n", "'s", "\r\n", "word", "- [x] "]), max_size=120
    ).map("".join)
)
def test_a_text_counted_from_its_cached_lines_counts_what_the_whole_text_counts(
    counter: TokenCounter, text: str
) -> None:
    counter.count_by_lines(text)  # the second count is made of cached lines only
    assert counter.count_by_lines(text) == len(counter._encoding.encode_ordinary(text))


def test_counting_a_text_again_by_its_lines_encodes_only_the_lines_that_changed(counter: TokenCounter) -> None:
    """The hot tier is rendered and counted on every context read: one new note must not cost the whole text."""
    encoded: list[str] = []
    encoding = counter._encoding

    class Spy:
        name = encoding.name

        def encode_ordinary(self, text: str) -> list[int]:
            encoded.append(text)
            return list(encoding.encode_ordinary(text))

    spied = TokenCounter(Spy())
    lines = [f"- note {i}: {'word ' * (i % 5)}\n" for i in range(200)]
    text = "# Hot\n\n## Notes\n" + "".join(lines)
    first = spied.count_by_lines(text)
    encoded.clear()

    again = spied.count_by_lines(text + "- a new note\n")

    assert encoded == ["- a new note\n"]
    assert again == first + len(encoding.encode_ordinary("- a new note\n"))
    assert again == len(encoding.encode_ordinary(text + "- a new note\n"))
