"""Fixtures for unit tests that build stores and workspaces directly (no daemon)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from memd.tokens import TokenCounter


@pytest.fixture(scope="session")
def counter() -> TokenCounter:
    """One tokenizer for the whole run: loading it costs ~120 ms."""
    return TokenCounter.for_encoding("cl100k_base")


@pytest.fixture
def io() -> Iterator[ThreadPoolExecutor]:
    """The worker threads a Workspace makes its writes durable on."""
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="test-io") as executor:
        yield executor
