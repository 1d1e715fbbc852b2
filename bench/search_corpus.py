"""A deterministic warm-tier corpus for the search figures: day files written directly in memd's format (fast:
100,000 entries in about a second), and a mix of queries of known selectivity.

Words are drawn Zipf-like from a vocabulary of common engineering words and generated identifiers, so a query
for a frequent word matches thousands of entries and one for a rare word a handful, as in real logs.
"""

from __future__ import annotations

import random
from datetime import date, timedelta
from pathlib import Path

from memd.tiers import warm_format
from memd.tiers.warm_format import WarmEntry

ENTRIES_PER_DAY = 1000
_BASE = (  # noqa: SIM905 - one word list, written as prose
    "test build deploy cache redis postgres migration schema index query latency timeout retry backoff "
    "token auth jwt session cookie header request response handler router middleware config reload "
    "signal socket thread lock queue batch commit fsync append replace rename snapshot history restore "
    "checkpoint summary budget window context memory learning decision reason risk pending step file "
    "parser lexer grammar format render escape unicode newline markdown heading section fence entry "
    "worker pool executor future callback loop event watcher inotify debounce reconcile discovery "
    "permission uid gid group mode owner access reader writer admin audit log metric trace span "
    "benchmark profile flame graph allocation memory leak garbage collector heap stack frame container "
    "image registry volume mount network bridge proxy gateway certificate tls handshake cluster node "
    "replica leader follower election quorum raft consensus partition shard rebalance"
).split()


def vocabulary(size: int = 4000, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    words = list(_BASE)
    syllables = "ka lo mi ne ru sa ti vo ze qu bar dex fin gor hul jin kor lum mor nix pol rex sol tor vin".split()  # noqa: SIM905
    while len(words) < size:
        word = "".join(rng.choice(syllables) for _ in range(rng.randint(2, 4)))
        if rng.random() < 0.15:
            word = word.capitalize() + rng.choice(("Manager", "Factory", "Handler", "Store", "Client"))
        if word not in words:
            words.append(word)
    return words


class Sampler:
    def __init__(self, words: list[str], seed: int) -> None:
        self.words = words
        self.rng = random.Random(seed)
        self.cum: list[float] = []
        total = 0.0
        for rank in range(len(words)):
            total += 1.0 / (rank + 1)
            self.cum.append(total)

    def word(self) -> str:
        x = self.rng.random() * self.cum[-1]
        lo, hi = 0, len(self.cum) - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if self.cum[mid] < x:
                lo = mid + 1
            else:
                hi = mid
        return self.words[lo]

    def words_(self, low: int, high: int) -> str:
        return " ".join(self.word() for _ in range(self.rng.randint(low, high)))


def write_corpus(warm: Path, entries: int, last_day: date, seed: int = 1) -> list[Path]:
    """`entries` entries in day files of ENTRIES_PER_DAY each, the newest day being `last_day`."""
    warm.mkdir(parents=True, exist_ok=True)
    sampler = Sampler(vocabulary(), seed)
    days = max(1, -(-entries // ENTRIES_PER_DAY))
    paths = []
    left = entries
    for back in range(days):
        day = last_day - timedelta(days=back)
        count = min(ENTRIES_PER_DAY, left)
        left -= count
        parts = [f"# Activity Log {day.isoformat()}\n\n"]
        for i in range(count):
            seconds = i * 86_400 // max(count, 1)
            entry = WarmEntry(
                time=f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}",
                action=sampler.words_(3, 7),
                details=(("cmd", sampler.words_(2, 4)), ("file", f"src/{sampler.word()}/{sampler.word()}.py")),
                result=sampler.words_(3, 8),
            )
            parts.append(warm_format.render_entry(entry))
        path = warm / warm_format.day_filename(day)
        path.write_text("".join(parts), encoding="utf-8")
        paths.append(path)
    return paths


def queries() -> list[tuple[str, str]]:
    """(memd query, the word a plain grep looks for): a frequent word, a middling one, a rare one, two words, a
    phrase and a prefix (grep gets the first word: it has no AND, so this favours grep)."""
    words = vocabulary()
    return [
        (words[3], words[3]),  # among the most frequent: thousands of matches, only the best 20 returned
        (words[60], words[60]),
        (words[400], words[400]),
        (words[2500], words[2500]),  # rare
        (f"{words[10]} {words[40]}", words[10]),
        (f'"{words[5]} {words[6]}"', f"{words[5]} {words[6]}"),
        (words[120][:4] + "*", words[120][:4]),
    ]
