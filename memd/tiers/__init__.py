"""The three memory tiers: pure formats and their stores."""

from __future__ import annotations

import errno
from pathlib import Path

from memd import fsio
from memd.errors import CorruptFile


def read_tier_file(path: Path) -> bytes | None:
    """A store's file, or None when absent. Anything memd must not read through — a symlink (the file or its
    directory), a FIFO, a device — or cannot read raises CorruptFile, which keeps the last good state in memory
    and refuses writes until a person fixes it."""
    try:
        if path.parent.is_symlink():
            raise OSError(errno.ELOOP, "its directory is a symlink")
        return fsio.read_bytes(path)
    except OSError as exc:
        raise CorruptFile(
            f"{path} cannot be read ({exc.strerror or exc}): memd reads and writes only regular files, never "
            "through symlinks; replace it with a regular file"
        ) from None
