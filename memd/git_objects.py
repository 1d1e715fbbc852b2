"""Two answers read from git's own files without a git process, where a first sweep of hundreds of workspaces spends
most of its time starting processes:
- `directory_blobs`: a directory of a commit's tree from the loose objects: what retention checks day files
  against right after memd's own commit, whose objects git has just written loose (one `ls-tree` less);
- `index_paths`: the paths in the index file: what the first commit of a repository memd has just made holds,
  its index having been empty (one `ls-files` less).

Only ever an answer git would give, or None, and the caller asks git: an object that is not loose (packed by
maintenance, or only in an alternate object store), replace refs (`git replace`: git would read another object),
an index of a version or with an extension this does not read (version 4's compressed paths, a split or sparse
index), anything that does not parse, an id of neither SHA-1's nor SHA-256's length. Imports nothing of memd.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

_ID_BYTES = {40: 20, 64: 32}  # hex length -> raw length: SHA-1 and SHA-256 repositories
_TREE_MODE = b"40000"
_FILE_MODES = (b"100644", b"100755")


def directory_blobs(git_dir: Path, commit: str, directory: str) -> dict[str, str] | None:
    """The blob id of each regular file directly in `directory` (a path without a trailing slash) at `commit`
    (name -> id; {} when the commit has no such directory), or None when git must be asked instead."""
    raw = _ID_BYTES.get(len(commit))
    if raw is None or _replaces_objects(git_dir):
        return None
    body = _read(git_dir, commit, b"commit")
    if body is None or not body.startswith(b"tree "):
        return None
    tree = body[5 : 5 + 2 * raw].decode("ascii", "replace")
    for part in directory.split("/"):
        entries = _tree(git_dir, tree, raw)
        if entries is None:
            return None
        found = entries.get(part.encode("utf-8", "surrogateescape"))
        if found is None or found[0] != _TREE_MODE:
            return {}
        tree = found[1]
    entries = _tree(git_dir, tree, raw)
    if entries is None:
        return None
    return {
        name.decode("utf-8", "surrogateescape"): oid for name, (mode, oid) in entries.items() if mode in _FILE_MODES
    }


def _replaces_objects(git_dir: Path) -> bool:
    """Does the repository have replace refs (`git replace`)? git reads a replaced object through them; this
    reader does not, so it leaves such a repository to git."""
    replace = git_dir / "refs" / "replace"
    try:
        if any(replace.iterdir()):
            return True
    except FileNotFoundError:
        pass
    except OSError:
        return True
    try:
        with open(git_dir / "packed-refs", "rb") as packed:
            return any(b" refs/replace/" in line for line in packed)
    except FileNotFoundError:
        return False
    except OSError:
        return True


def _tree(git_dir: Path, tree: str, raw: int) -> dict[bytes, tuple[bytes, str]] | None:
    """A tree object's entries (name -> (mode, id)), or None."""
    body = _read(git_dir, tree, b"tree")
    if body is None:
        return None
    entries: dict[bytes, tuple[bytes, str]] = {}
    at = 0
    while at < len(body):
        space = body.find(b" ", at)
        nul = body.find(b"\0", space + 1)
        if space < 0 or nul < 0 or nul + 1 + raw > len(body):
            return None
        entries[body[space + 1 : nul]] = (body[at:space], body[nul + 1 : nul + 1 + raw].hex())
        at = nul + 1 + raw
    return entries


def _read(git_dir: Path, oid: str, kind: bytes) -> bytes | None:
    """The body of loose object `oid` when it is one of `kind`, or None."""
    if len(oid) not in _ID_BYTES or any(c not in "0123456789abcdef" for c in oid):
        return None
    try:
        stream = zlib.decompressobj()
        data = stream.decompress((git_dir / "objects" / oid[:2] / oid[2:]).read_bytes())
    except (OSError, zlib.error):
        return None
    if not stream.eof or stream.unused_data:  # cut short, or bytes after the stream: git refuses such an object
        return None
    header, nul, body = data.partition(b"\0")
    if not nul or header != kind + b" " + str(len(body)).encode():
        return None
    return body


_ENTRY_FIXED = 40  # ctime, mtime, dev, ino, mode, uid, gid, size: ten 32-bit fields
_EXTENDED = 0x4000
_STAGE = 0x3000
_NAME_LENGTH = 0x0FFF
_UNREAD_EXTENSIONS = (b"link", b"sdir")  # entries kept elsewhere (split index) or folded (sparse index)


def index_paths(git_dir: Path, sha256: bool = False, plain_only: bool = False) -> list[str] | None:
    """The path of each stage-0 entry of the index file (git's order), [] when there is no index file, or None
    when git must be asked instead. `sha256`: the repository's object ids are SHA-256's. `plain_only`: None as
    well when an entry is anything but a plain staged file (an unmerged stage, an intent-to-add or another
    extended entry)."""
    try:
        data = (git_dir / "index").read_bytes()
    except FileNotFoundError:
        return []
    except OSError:
        return None
    raw = 32 if sha256 else 20
    if len(data) < 12 + raw or data[:4] != b"DIRC":
        return None
    version, count = struct.unpack(">II", data[4:12])
    if version not in (2, 3):
        return None
    end = len(data) - raw  # the checksum
    paths: list[str] = []
    at = 12
    for _ in range(count):
        flags_at = at + _ENTRY_FIXED + raw
        if flags_at + 2 > end:
            return None
        (flags,) = struct.unpack(">H", data[flags_at : flags_at + 2])
        if plain_only and flags & (_STAGE | _EXTENDED):
            return None
        name_at = flags_at + 2 + (2 if flags & _EXTENDED else 0)
        nul = data.find(b"\0", name_at, end)
        if nul < 0 or (flags & _NAME_LENGTH != _NAME_LENGTH and nul - name_at != flags & _NAME_LENGTH):
            return None
        if not flags & _STAGE:
            paths.append(data[name_at:nul].decode("utf-8", "surrogateescape"))
        at += (name_at - at + (nul - name_at) + 8) & ~7  # NUL-padded to a multiple of 8 bytes
    while at < end:  # extensions: a signature and a size each
        if at + 8 > end or data[at : at + 4] in _UNREAD_EXTENSIONS:
            return None
        (size,) = struct.unpack(">I", data[at + 4 : at + 8])
        at += 8 + size
    return paths if at == end else None
