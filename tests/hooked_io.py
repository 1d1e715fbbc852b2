"""An I/O executor for tests that act inside memd's work: what a person or a tool does between memd's planning of
a batch and its write (a save, an append), run in the worker right before the write."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any


class HookedIO(ThreadPoolExecutor):
    """One worker; `edits` run in it, in order, before the next job submitted (and are then gone)."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="test-io")
        self.edits: list[Callable[[], None]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        edits, self.edits = self.edits, []

        def run() -> Any:
            for edit in edits:
                edit()
            return fn(*args, **kwargs)

        return super().submit(run)
