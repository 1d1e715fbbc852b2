"""A clock tests set by hand (memd.workspace.Clock)."""

from __future__ import annotations

from datetime import UTC, datetime

START = datetime(2024, 3, 15, 9, 30, 0, tzinfo=UTC)


class FixedClock:
    def __init__(self, now: datetime) -> None:
        self.current = now

    def now(self) -> datetime:
        return self.current
