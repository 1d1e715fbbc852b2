"""The process runtime of `memd run`: logging, and which event loop runs the daemon.

The event loop is uvloop when it is installed (`daemon.loop = "auto"`), else asyncio's own; `daemon.loop` or the
environment variable MEMD_LOOP (which wins, to rule the loop out without editing the config) picks one, and status
says which runs (`loop_name`). memd.daemon picks the loop before the daemon is made and sets up logging as it
starts; none of this is the daemon's wiring or lifecycle, so it lives apart from them.
Imports memd.errors.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from memd.errors import StartupError

LOOPS = ("auto", "uvloop", "asyncio")


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("apscheduler").setLevel(max(logging.WARNING, logging.getLevelName(level.upper())))


def loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """The event loop `daemon.loop` (or MEMD_LOOP) asks for. Raises StartupError for "uvloop" without uvloop, or
    for a name that is not a loop."""
    if choice not in LOOPS:
        raise StartupError(f"MEMD_LOOP={choice!r} is not an event loop memd knows; use one of {', '.join(LOOPS)}")
    if choice == "asyncio":
        return asyncio.new_event_loop
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise StartupError(
                'daemon.loop = "uvloop" but uvloop is not installed (pip install uvloop), or use "auto"'
            ) from None
        return asyncio.new_event_loop
    return uvloop.new_event_loop


def loop_name() -> str:
    """Which event loop runs this daemon: "uvloop" or "asyncio"."""
    return "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio"
