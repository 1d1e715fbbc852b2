"""Specification of how a store reads its file (memd.tiers.read_tier_file): regular files only, never past a cap."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memd import tiers
from memd.errors import CorruptFile
from memd.tiers import read_tier_file

MIB = 1 << 20


def test_a_file_is_read_whole_and_an_absent_one_is_none(tmp_path: Path) -> None:
    path = tmp_path / "context.json"
    assert read_tier_file(path) is None

    path.write_bytes(b'{"task": "t"}\n')

    assert read_tier_file(path) == b'{"task": "t"}\n'
    assert read_tier_file(path, offset=2) == b'task": "t"}\n'


def test_the_bytes_before_the_offset_are_fed_to_skipped_in_pieces_and_only_the_rest_is_returned(
    tmp_path: Path,
) -> None:
    path = tmp_path / "2026-12-03.md"
    data = bytes(range(256)) * 4096 + b"the tail"  # 1 MiB before the tail: more than one buffer's worth
    path.write_bytes(data)
    pieces: list[bytes] = []

    tail = read_tier_file(path, max_bytes=2 * MIB, offset=MIB, skipped=lambda piece: pieces.append(bytes(piece)))

    assert tail == b"the tail"
    assert b"".join(pieces) == data[:MIB]
    assert len(pieces) > 1


def test_skipped_is_fed_what_there_is_of_a_file_now_shorter_than_the_offset(tmp_path: Path) -> None:
    path = tmp_path / "2026-12-03.md"
    path.write_bytes(b"short")
    pieces: list[bytes] = []

    assert read_tier_file(path, offset=100, skipped=lambda piece: pieces.append(bytes(piece))) == b""
    assert b"".join(pieces) == b"short"


def test_a_file_of_exactly_the_cap_is_read(tmp_path: Path) -> None:
    path = tmp_path / "MEMORY.md"
    path.write_bytes(b"x" * 1000)

    assert read_tier_file(path, max_bytes=1000) == b"x" * 1000


def test_a_file_over_the_cap_is_refused_naming_its_size_the_cap_and_the_setting(tmp_path: Path) -> None:
    path = tmp_path / "MEMORY.md"
    path.write_bytes(b"x" * 1001)

    with pytest.raises(CorruptFile) as error:
        read_tier_file(path, max_bytes=1000)

    message = error.value.message
    assert str(path) in message
    assert "1,001 bytes" in message and "1,000 bytes" in message
    assert "[limits]" in message


def test_a_40_mb_file_is_refused_without_reading_a_byte_of_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "context.json"
    with path.open("wb") as f:
        f.truncate(40 * 1000 * 1000)  # sparse: costs no disk
    read: list[int] = []
    real_pread, real_read = os.pread, os.read

    def counting_pread(fd: int, n: int, offset: int) -> bytes:
        read.append(n)
        return real_pread(fd, n, offset)

    def counting_read(fd: int, n: int) -> bytes:
        read.append(n)
        return real_read(fd, n)

    monkeypatch.setattr(os, "pread", counting_pread)
    monkeypatch.setattr(os, "read", counting_read)

    with pytest.raises(CorruptFile, match="40,000,000 bytes"):
        read_tier_file(path, max_bytes=tiers.HOT_MAX_BYTES)

    assert read == []


def test_without_a_cap_given_a_file_past_the_default_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "context.json"
    with path.open("wb") as f:
        f.truncate(tiers.DEFAULT_MAX_BYTES + 1)

    with pytest.raises(CorruptFile, match="over memd's cap"):
        read_tier_file(path)


def test_a_file_that_grows_past_the_cap_while_it_is_read_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "MEMORY.md"
    path.write_bytes(b"x" * 100)
    real_pread = os.pread

    def grows_first(fd: int, n: int, offset: int) -> bytes:
        if path.stat().st_size == 100:
            with path.open("ab") as f:  # someone appends between the fstat and the read
                f.write(b"y" * 2 * MIB)
        return real_pread(fd, n, offset)

    monkeypatch.setattr(os, "pread", grows_first)

    with pytest.raises(CorruptFile, match="over memd's cap"):
        read_tier_file(path, max_bytes=MIB)


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory", "symlinked directory"])
def test_anything_but_a_regular_file_is_refused(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "real.json"
    target.write_bytes(b"{}")
    path = tmp_path / "hot" / "context.json"
    path.parent.mkdir()
    if kind == "symlink":
        path.symlink_to(target)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        real = tmp_path / "elsewhere"
        real.mkdir()
        (real / "context.json").write_bytes(b"{}")
        path.parent.rmdir()
        path.parent.symlink_to(real)

    with pytest.raises(CorruptFile, match="regular file"):
        read_tier_file(path)


def test_the_default_caps_are_the_documented_ones() -> None:
    assert (tiers.HOT_MAX_BYTES, tiers.COLD_MAX_BYTES, tiers.WARM_DAY_MAX_BYTES) == (4 * MIB, 16 * MIB, 64 * MIB)


def test_the_start_of_a_file_is_read_back_only_whole_and_only_from_a_regular_file(tmp_path: Path) -> None:
    path = tmp_path / "MEMORY.md"
    path.write_bytes(b"# Agent Memory\n## A\n")
    link = tmp_path / "link.md"
    link.symlink_to(path)

    assert tiers.read_tier_start(path, 15) == b"# Agent Memory\n"
    assert tiers.read_tier_start(path, 100) is None  # shorter than what was written: not that start
    assert tiers.read_tier_start(link, 15) is None
    assert tiers.read_tier_start(tmp_path / "absent.md", 1) is None
