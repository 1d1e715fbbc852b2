"""Keeping a long-running daemon's memory in bounds without paying for it in page faults: glibc malloc settings
applied once at start (Linux with glibc). A trade-off, measured both ways.

glibc raises its mmap threshold each time a block it allocated with mmap is freed (up to 32 MiB); from then on,
blocks that size come from the heap arenas instead and fragment them. memd builds and drops megabyte strings all
day (MEMORY.md rewritten whole at each learning, a big day file read for a snapshot, a large answer encoded), so
its RSS kept climbing while its live objects did not: the soak's RSS slope was +182 to +218 MB/hour over 6
minutes (torture/README.md). The threshold is therefore fixed, so glibc never raises it, and two arenas bound
the per-thread arenas memd's thread pools would otherwise each get.

Fixed where: a block from mmap is fresh pages, each faulted in and zeroed on first touch, ~3.5 us per 4 KiB page
on this VM. While `cold.learn` rewrote MEMORY.md whole (and then, in a burst, made it anew per learning), that
was ~1 ms per megabyte string per learning, and the threshold sat at 4 MiB so that those strings reused the heap
(`cold.learn` 12.2 / 10.8 ms at 128 KiB, 6.82 / 5.44 ms at 4 MiB, at 20,000 learnings). A burst's learnings are
now appended without copying the file (memd.tiers.cold_store), and the megabyte strings left (a fold every
1,000 learnings, an accepted proposal, a big answer) are few; the heap they shared kept their holes: a daemon fed
40,000 learnings (4 writers and a reader, one workspace) grew its main heap 25 -> 43-47 MB, 18-22 MB of it free
and not given back. So blocks of MMAP_THRESHOLD (256 KiB) and more come from mmap and go back to the kernel
when freed, and the heap's top is given back past TRIM_THRESHOLD (4 MiB; a big block freed at the top is not
given back and faulted in again at the next). The same load: main heap 20-22 MB at the end, end RSS 114.7
against 135.9 MB, daemon CPU 34.5 against 33.5 s; figure 10b (docs/benchmarks.md) within noise of the 4 MiB
threshold. A 6-minute soak of older code: RSS slope +139 MB/hour at 4 MiB, +88-98 at 128 KiB, +182-218 with
glibc's defaults (torture/README.md).

The operator's environment wins: with MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_, MALLOC_ARENA_MAX or
GLIBC_TUNABLES set, glibc has applied them already and nothing is changed here. Another C library (musl has no
`mallopt`): nothing is done. Imports nothing from memd.
"""

from __future__ import annotations

import ctypes
import logging
import sys
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)

MMAP_THRESHOLD = 256 << 10
TRIM_THRESHOLD = 4 << 20
ARENA_MAX = 2
_M_TRIM_THRESHOLD = -1  # glibc <malloc.h>
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
OWN_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_ARENA_MAX", "GLIBC_TUNABLES")


def _glibc_mallopt() -> Callable[[int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt


def tune(env: Mapping[str, str], mallopt: Callable[[int, int], int] | None = None) -> dict[str, object]:
    """Apply the settings (before the thread pools start: arenas are made per thread as threads first allocate).
    Returns what status shows: the settings applied, or why none were."""
    if any(env.get(name) for name in OWN_ENV):
        return {
            "applied": False,
            "reason": "set in the environment (" + ", ".join(n for n in OWN_ENV if env.get(n)) + ")",
        }
    mallopt = mallopt or _glibc_mallopt()
    if mallopt is None:
        return {"applied": False, "reason": "not glibc"}
    settings = (
        ("M_MMAP_THRESHOLD", _M_MMAP_THRESHOLD, MMAP_THRESHOLD),
        ("M_TRIM_THRESHOLD", _M_TRIM_THRESHOLD, TRIM_THRESHOLD),
        ("M_ARENA_MAX", _M_ARENA_MAX, ARENA_MAX),
    )
    refused = [name for name, option, value in settings if mallopt(option, value) != 1]
    if refused:  # each one taken stays taken: say exactly which were not
        log.warning("glibc refused %s (mallopt); memory use and page faults may differ", ", ".join(refused))
        return {"applied": False, "reason": f"mallopt refused {', '.join(refused)}"}
    return {
        "applied": True,
        "mmap_threshold": MMAP_THRESHOLD,
        "trim_threshold": TRIM_THRESHOLD,
        "arena_max": ARENA_MAX,
    }
